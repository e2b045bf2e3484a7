"""TRL and EasyR1 reward functions are recognised by signature and adapted to the per-item call;
a signature of no known shape is one error at load."""

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from mmrlvr.types import CompletionText, Sample, Verdict
from mmrlvr.verifiers.base import resolve_verifier, safe_verify
from mmrlvr.verifiers.reward_styles import NOT_APPLICABLE, RewardSignatureError, reward_style

FILE = Path(__file__).resolve().parents[1] / "e2e" / "trl_rewards.py"
SAMPLE = Sample("s7", ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]},),
                reference="3", meta={"options": ["2", "3"]})


def _load(name):
    return resolve_verifier(f"{FILE}:{name}")


def test_styles_by_signature():
    def ours(completion, sample): ...
    def ours_extra(completion, sample, scale=1.0): ...
    def trl(completions, **kwargs): ...
    def trl_kw_only(*, completions, **kwargs): ...
    def easy_batch(reward_inputs): ...
    def easy_seq(predict_str, ground_truth): ...
    assert [reward_style(f) for f in (ours, ours_extra, trl, trl_kw_only, easy_batch, easy_seq)] == [
        "mmrlvr", "mmrlvr", "trl", "trl", "easyr1_batch", "easyr1"]
    with pytest.raises(RewardSignatureError, match=r"takes \(completion, sample, reference\); expected"):
        _load("takes_three")


def test_trl_reward_len_keeps_its_negative_scores():
    fn = _load("reward_len")
    assert safe_verify(fn, "x" * 26, SAMPLE) == Verdict(-6.0, "")  # -abs(20 - 26): not clipped, not a failure
    assert safe_verify(fn, "x" * 20, SAMPLE).score == 0.0


def test_trl_keyword_arguments_are_what_trl_passes():
    fn = _load("reward_len_seen_kwargs")
    assert safe_verify(fn, CompletionText("three", [11, 12]), SAMPLE).score == 1.0
    assert safe_verify(fn, "three", SAMPLE).score == 0.0  # no ids known: completion_ids=[None]


def test_none_is_not_applicable_and_a_raise_is_a_failure():
    fn = _load("only_short")
    assert safe_verify(fn, "abc", SAMPLE).score == 1.0
    v = safe_verify(fn, "abcdefgh", SAMPLE)
    assert v.score == 0.0 and v.reason == NOT_APPLICABLE
    broken = safe_verify(_load("always_raises"), "abc", SAMPLE)
    assert broken.score == 0.0 and broken.reason.startswith("verifier failed: raised KeyError")


def test_easyr1_shapes_give_overall_and_parts():
    v = safe_verify(_load("compute_score"), CompletionText("ab", [5, 6, 7]), SAMPLE)
    assert v.score == 1.0 and v.parts == {"format": 1.0, "length": 3.0}
    v = safe_verify(_load("compute_score_sequential"), "the answer is 3", SAMPLE)
    assert v.score == 1.0 and v.parts == {"accuracy": 1.0}
    assert safe_verify(_load("compute_score_sequential"), "the answer is 4", SAMPLE).score == 0.0


@given(st.text(max_size=60))
def test_the_adapted_trl_reward_is_the_function_on_a_batch_of_one(text):
    import importlib.util

    spec = importlib.util.spec_from_file_location("trl_rewards_direct", FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert safe_verify(_load("reward_len"), text, SAMPLE).score == module.reward_len([text])[0]


def test_completion_text_is_the_str_with_its_ids_across_pickling():
    import pickle

    c = pickle.loads(pickle.dumps(CompletionText("abc", [1, 2])))
    assert c == "abc" and isinstance(c, str) and c.token_ids == (1, 2) and c.upper() == "ABC"


def test_a_broken_reward_stops_after_a_whole_step_or_half_of_three():
    from mmrlvr.verifiers.base import failed
    from mmrlvr.verifiers.failures import FailureCounter

    ok, bad = Verdict(1.0), failed("raised KeyError: 'x'")
    c = FailureCounter(warn=lambda msg: None)
    c.record("r.py:f", [bad, bad, ok, ok])  # step 1: 2 of 4
    assert c.end_step(0.5) is None
    c.record("r.py:f", [bad, bad, bad, ok])  # step 2: 3 of 4 (5 of 8 so far, but only 2 steps)
    assert c.end_step(0.5) is None
    c.record("r.py:f", [bad, ok, ok, ok])  # step 3: 6 of 12 = 0.5, not more than half
    assert c.end_step(0.5) is None
    c.record("r.py:f", [bad, bad, ok, ok])  # steps 2-4: 3 + 1 + 2 = 6 of 12: still not more than half
    assert c.end_step(0.5) is None
    c.record("r.py:f", [bad, bad, bad, ok])  # steps 3-5: 1 + 2 + 3 = 6 of 12
    assert c.end_step(0.5) is None
    c.record("r.py:f", [bad, bad, ok, ok])  # steps 4-6: 2 + 3 + 2 = 7 of 12 > 0.5
    why = c.end_step(0.5)
    assert "on 7 of 12 items over the last 3 steps" in why and "raised KeyError" in why
    assert c.end_step(None) is None  # null: only warn
    c.record("r.py:f", [bad] * 4)
    assert c.end_step(None) is None
    c.record("r.py:f", [bad] * 4)
    assert "on all 4 items of this step" in c.end_step(1.0)


def test_async_rewards_of_every_shape_are_awaited():
    assert safe_verify(_load("reward_len_async"), "x" * 26, SAMPLE, 5.0) == Verdict(-6.0, "")  # TRL
    assert safe_verify(_load("judge"), "it is 3", SAMPLE, 5.0) == Verdict(1.0, "")  # mmrlvr's own
    assert safe_verify(_load("judge"), "it is 2", SAMPLE, 5.0) == Verdict(0.0, "")
    v = safe_verify(_load("compute_score_async"), "the answer is 3", SAMPLE, 5.0)  # EasyR1
    assert v.score == 1.0 and v.parts == {"accuracy": 0.5}


def test_an_async_reward_past_the_time_out_is_a_failure_of_that_item():
    import time

    from mmrlvr.verifiers.base import is_failure
    from mmrlvr.verifiers.score import make_scorer

    t0 = time.monotonic()
    v = safe_verify(_load("judge_never_answers"), "abc", SAMPLE, 0.2)
    assert v == Verdict(0.0, "verifier failed: timed out after 0.2s") and is_failure(v)
    assert time.monotonic() - t0 < 5  # bounded, not the judge's 60 s
    slow = _load("slow_judge")  # the bound is the time-out given: 0.6 s is past 0.2 s, within 5 s
    assert safe_verify(slow, "abc", SAMPLE, 0.2).reason == "verifier failed: timed out after 0.2s"
    assert safe_verify(slow, "abc", SAMPLE, 5.0) == Verdict(1.0, "")
    scorer = make_scorer(timeout=0.25, workers=0, plugins=[f"{FILE}:judge_never_answers"])  # in-process: the await is bounded
    out = scorer(f"{FILE}:judge_never_answers", ["a", "b"], [SAMPLE, SAMPLE])
    assert [x.reason for x in out] == ["verifier failed: timed out after 0.25s"] * 2


def test_an_async_reward_is_awaited_inside_a_running_event_loop():
    """A notebook runs an event loop in its main thread, where in-process scoring runs too."""
    import asyncio

    async def notebook_cell():
        return safe_verify(_load("reward_len_async"), "x" * 18, SAMPLE, 5.0)

    assert asyncio.run(notebook_cell()) == Verdict(-2.0, "")


def test_the_worker_pool_bounds_an_async_reward():
    from mmrlvr.verifiers.pool import VerifierPool

    with VerifierPool(timeout=0.3, workers=1, plugins=[f"{FILE}:judge_never_answers", f"{FILE}:reward_len_async"]) as pool:
        assert [v.reason for v in pool(f"{FILE}:judge_never_answers", ["a"], [SAMPLE])] == [
            "verifier failed: timed out after 0.3s"]
        assert [v.score for v in pool(f"{FILE}:reward_len_async", ["x" * 21], [SAMPLE])] == [-1.0]
