"""`rollout.generate_max_rows` on the tiny model: each `generate` call takes at most that many rows
(whole groups), and a seed gives the same completions whatever the split (inverse_cdf, greedy);
evaluation's calls are bounded alike and score the same."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from PIL import Image

from mmrlvr.config import RolloutConfig
from mmrlvr.rollout.hf import HFRolloutEngine, generate_calls
from mmrlvr.types import Sample

G = 3


def _samples() -> list[Sample]:
    """Five image prompts of different lengths (and image sizes): left padded to the longest."""
    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    texts = ["How many red shapes are there in this picture?", "Hi", "Count the squares.",
             "What colour is the largest shape in the middle of the image?", "Shapes?"]
    sizes = [(112, 112), (112, 84), (84, 84), (112, 112), (56, 84)]
    return [Sample(f"s{i}", q(t), i, images=(Image.new("RGB", sizes[i], (40 * i, 30, 200 - 40 * i)),))
            for i, t in enumerate(texts)]


@pytest.fixture(scope="module")
def engine(tiny):
    """The tiny policy's engine, with its 12 commonest tokens (a fifth of what it samples) added to
    the stop ids, so that completions stop at different lengths and calls run different numbers
    of steps."""
    model, processor = tiny
    eng = HFRolloutEngine(model, processor)
    out = eng.rollout(_samples(), G, RolloutConfig(max_new_tokens=12, temperature=1.2), seed=0)
    common = [tok for tok, _ in Counter(out.completion_ids.flatten().tolist()).most_common(12)]
    eng.stop_ids = [*eng.stop_ids, *common]
    return eng


@pytest.fixture
def calls(engine, monkeypatch):
    """Rows of each `generate` call (prompt rows x num_return_sequences)."""
    rows: list[int] = []
    real = engine.model.generate

    def counted(**kw):
        rows.append(kw["input_ids"].shape[0] * (kw["generation_config"].num_return_sequences or 1))
        return real(**kw)

    monkeypatch.setattr(engine.model, "generate", counted)
    return rows


def test_calls_take_whole_groups_within_the_bound():
    assert [list(c) for c in generate_calls(5, 3, None)] == [[0, 1, 2, 3, 4]]
    assert [list(c) for c in generate_calls(5, 3, 7)] == [[0, 1], [2, 3], [4]]  # 7 rows: 2 groups of 3
    assert [list(c) for c in generate_calls(5, 3, 3)] == [[0], [1], [2], [3], [4]]
    assert [list(c) for c in generate_calls(5, 4, 3)] == [[0], [1], [2], [3], [4]]  # a group above it: one a call
    assert [list(c) for c in generate_calls(2, 3, 100)] == [[0, 1]]


@pytest.mark.parametrize("shared_prefill", [True, False])
@pytest.mark.parametrize("mode", ["inverse_cdf", "greedy"])
def test_the_same_completions_whatever_the_split(engine, calls, mode, shared_prefill):
    greedy = mode == "greedy"
    base = RolloutConfig(max_new_tokens=12, temperature=1.2, shared_prefill=shared_prefill)
    whole = engine.rollout(_samples(), G, base, seed=5, greedy=greedy)
    assert calls == [15] and whole.completion_ids.shape[0] == 15
    lengths = whole.completion_mask.sum(1)
    # mixed lengths, some stopped early (greedy: a group's rows are one completion)
    assert len(set(lengths.tolist())) > (1 if greedy else 3) and int(lengths.min()) < 12
    for max_rows, expected in ((3, [3] * 5), (7, [6, 6, 3]), (9, [9, 6]), (15, [15])):
        calls.clear()
        split = engine.rollout(_samples(), G, dataclasses.replace(base, generate_max_rows=max_rows), seed=5, greedy=greedy)
        assert calls == expected
        assert torch.equal(split.completion_ids, whole.completion_ids), max_rows
        assert torch.equal(split.completion_mask, whole.completion_mask)
        assert [c.text for c in split.completions] == [c.text for c in whole.completions]
        assert [c.truncated for c in split.completions] == [c.truncated for c in whole.completions]
        assert [c.sample_index for c in split.completions] == [i // G for i in range(15)]
        torch.testing.assert_close(split.sampler_logprobs, whole.sampler_logprobs, rtol=0, atol=1e-5)
        assert torch.equal(split.prompt_inputs["input_ids"], whole.prompt_inputs["input_ids"])
    # the seed still matters: another one samples other completions
    if not greedy:
        other = engine.rollout(_samples(), G, dataclasses.replace(base, generate_max_rows=7), seed=6)
        assert not torch.equal(other.completion_ids, whole.completion_ids)


def test_multinomial_calls_are_bounded_and_repeatable(engine, calls):
    """transformers' own draw takes a call's rows together, so the split changes the tokens (the
    docs say so); a given split and seed still give the same completions, within the bound."""
    rc = RolloutConfig(max_new_tokens=8, temperature=1.2, sampler="multinomial", generate_max_rows=6)
    a = engine.rollout(_samples(), G, rc, seed=2)
    assert calls == [6, 6, 3]
    b = engine.rollout(_samples(), G, rc, seed=2)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.completion_ids.shape[0] == 15


def test_evaluation_calls_are_bounded_and_score_the_same(engine, calls):
    from mmrlvr.tasks import load_task
    from mmrlvr.train.evaluate import evaluate
    from mmrlvr.verifiers.score import InProcessScorer

    rows = load_task("counting", "eval", 7, 0)
    rc = RolloutConfig(max_new_tokens=6, temperature=1.2)
    whole = evaluate(engine, rows, InProcessScorer(), rc, batch_size=8, k=3)
    assert calls[0] == 7  # the greedy pass: every prompt in one call; then mean@3 over 2 prompts a call
    calls.clear()
    bounded = evaluate(engine, rows, InProcessScorer(), dataclasses.replace(rc, generate_max_rows=3), batch_size=8, k=3)
    # greedy: 7 rows in calls of 3, 3, 1; sampled: eval batches of 8 // 3 = 2 prompts, each in calls of one group
    assert calls == [3, 3, 1] + [3, 3] * 3 + [3]
    assert [e["completion"] for e in bounded["examples"]] == [e["completion"] for e in whole["examples"]]
    assert bounded["accuracy"] == whole["accuracy"] and bounded["mean_length"] == whole["mean_length"]
    assert bounded["mean@3"] == whole["mean@3"]  # inverse_cdf: the same samples in any split


def test_a_bound_below_one_group_is_one_line_before_anything_loads():
    from mmrlvr.config import load_config
    from mmrlvr.checks.validate import config_errors

    cfg = load_config(None, ["rollout.group_size=8", "rollout.generate_max_rows=6"])
    assert config_errors(cfg) == ["rollout.generate_max_rows=6: at least rollout.group_size (8): a call generates whole groups"]
    assert config_errors(load_config(None, ["rollout.group_size=8", "rollout.generate_max_rows=8"])) == []
    assert config_errors(load_config(None, ["rollout.generate_max_rows=0"])) == [
        "rollout.generate_max_rows=0: expected an integer >= 1 (or null: all rows in one call)"]
