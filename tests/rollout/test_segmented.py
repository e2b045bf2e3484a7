"""Segmented generation on the tiny model: keep-all is today's rollout bit for bit, dropped rows
leave the survivors' completions as they were, the continuation starts from the kept cache and the
rows' own random stream, the counts are the hand-computed ones, the prefix hidden state is what a
teacher-forced forward gives, and `multinomial` is the same only while the batch is."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from PIL import Image

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import join_prompt_completion, repeat_prompts
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.types import Sample

G, P, MAX = 4, 4, 12
RC = RolloutConfig(max_new_tokens=MAX, temperature=1.2)


def _samples() -> list[Sample]:
    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    return [
        Sample("a", q("How many red shapes are there in this picture?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
        Sample("b", q("Hi"), 2, images=(Image.new("RGB", (112, 84), (30, 30, 200)),)),  # shorter: left padded
    ]


@pytest.fixture(scope="module")
def engine(tiny):
    """The tiny policy's engine with its 12 commonest tokens added to the stop ids, so that rows
    stop before the prefix, within the continuation, or run to max_new_tokens."""
    model, processor = tiny
    eng = HFRolloutEngine(model, processor)
    out = eng.rollout(_samples(), G, RC, seed=0)
    eng.stop_ids = [*eng.stop_ids, *(t for t, _ in Counter(out.completion_ids.flatten().tolist()).most_common(12))]
    return eng


def _keep_all(views: list):
    def keep(view):
        views.append(view)
        return [True] * len(view.tokens)
    return keep


def _assert_same(a, b, exact: bool = True) -> None:
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.completion_mask, b.completion_mask)
    assert [c.text for c in a.completions] == [c.text for c in b.completions]
    assert [c.token_ids for c in a.completions] == [c.token_ids for c in b.completions]
    assert [(c.sample_index, c.truncated) for c in a.completions] == [(c.sample_index, c.truncated) for c in b.completions]
    if exact:
        assert torch.equal(a.sampler_logprobs, b.sampler_logprobs)
    else:  # another batch shape in the kernels: the float rounding moves (as for generate_max_rows)
        torch.testing.assert_close(a.sampler_logprobs, b.sampler_logprobs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("max_rows", [None, G])
@pytest.mark.parametrize("shared_prefill", [True, False])
def test_keeping_every_row_is_todays_rollout(engine, shared_prefill, max_rows):
    rc = dataclasses.replace(RC, shared_prefill=shared_prefill, generate_max_rows=max_rows)
    whole = engine.rollout(_samples(), G, rc, seed=0)
    lengths = whole.completion_mask.sum(1)
    truncated = [c.truncated for c in whole.completions]
    assert (lengths < P).any() and (lengths > P).any() and any(truncated) and not all(truncated)  # mixed
    views = []
    seg = engine.rollout_segmented(_samples(), G, rc, seed=0, prefix_tokens=P, keep=_keep_all(views))
    _assert_same(seg.output, whole)
    assert seg.rows.tolist() == list(range(2 * G))
    # the views: whole groups, each row's prefix and its log-probs as the rollout sampled them
    assert len(views) == (1 if max_rows is None else 2)
    assert torch.cat([v.prompt_index for v in views]).tolist() == [0] * G + [1] * G
    assert torch.cat([v.group_position for v in views]).tolist() == list(range(G)) * 2
    prefixes = [t for v in views for t in v.tokens]
    assert prefixes == [c.token_ids[:P] for c in whole.completions]
    assert torch.equal(torch.cat([v.sampler_logprobs for v in views]), whole.sampler_logprobs[:, :P])
    stopped = [len(c.token_ids) <= P and not c.truncated for c in whole.completions]
    assert torch.cat([v.finished for v in views]).tolist() == stopped
    # another seed samples other completions
    other = engine.rollout_segmented(_samples(), G, rc, seed=1, prefix_tokens=P, keep=_keep_all([]))
    assert not torch.equal(other.output.completion_ids, whole.completion_ids)


def test_the_continuation_starts_from_the_kept_cache(engine):
    """The prefix is not recomputed: after segment 1 (prefill, then one token a step) the first
    forward of the continuation takes one token per row, the P-th, into a cache of L + P - 1."""
    widths, cached = [], []

    def counted(module, args, kw):
        widths.append(kw["input_ids"].shape[1])
        cache = kw.get("cache", kw.get("past_key_values"))
        cached.append(cache.get_seq_length() if cache is not None else 0)

    handle = engine.model.register_forward_pre_hook(counted, with_kwargs=True)
    try:
        rc = dataclasses.replace(RC, shared_prefill=False)
        seg = engine.rollout_segmented(_samples(), G, rc, seed=3, prefix_tokens=P, keep=_keep_all([]))
    finally:
        handle.remove()
    width = seg.output.prompt_inputs["input_ids"].shape[1]
    steps = seg.output.completion_ids.shape[1]
    assert widths == [width] + [1] * (steps - 1)  # prefill, then one token a step through both segments
    assert cached[P] == width + P - 1  # the continuation's first forward: the prefix is in the cache


def test_dropped_rows_leave_the_survivors_as_they_were(engine):
    rc = RC
    whole = engine.rollout(_samples(), G, rc, seed=3)
    lengths = whole.completion_mask.sum(1).tolist()
    keep = [i % 3 != 1 for i in range(2 * G)]  # rows 1, 4, 7 dropped: one in each group at least
    views = []

    def keep_fn(view):
        views.append(view)
        return keep

    seg = engine.rollout_segmented(_samples(), G, rc, seed=3, prefix_tokens=P, keep=keep_fn)
    kept = [i for i in range(2 * G) if keep[i]]
    assert seg.rows.tolist() == kept
    pick = lambda out: dataclasses.replace(  # noqa: E731
        out, completions=[out.completions[i] for i in kept], completion_ids=out.completion_ids[kept],
        completion_mask=out.completion_mask[kept], sampler_logprobs=out.sampler_logprobs[kept])
    ref = pick(whole)
    t = max(lengths[i] for i in kept)
    ref = dataclasses.replace(ref, completion_ids=ref.completion_ids[:, :t], completion_mask=ref.completion_mask[:, :t],
                              sampler_logprobs=ref.sampler_logprobs[:, :t])
    _assert_same(seg.output, ref, exact=False)
    # the counts, by hand from the unpruned run: a row is still generating at the prefix iff longer than P
    pruned_alive = [i for i in range(2 * G) if not keep[i] and lengths[i] > P]
    assert pruned_alive  # the test drops a row that had more to say
    c = seg.counts
    assert (c.rows, c.kept, c.pruned_alive) == (2 * G, len(kept), len(pruned_alive))
    assert c.tokens_generated == sum(lengths[i] for i in kept) + sum(min(lengths[i], P) for i in range(2 * G) if not keep[i])
    assert c.tokens_saved_max == len(pruned_alive) * (MAX - P)
    saved = sum(lengths[i] - P for i in pruned_alive)  # what the unpruned run spent on them past the prefix
    assert c.tokens_generated == sum(lengths) - saved and 0 < saved <= c.tokens_saved_max
    survivors = [i for i in kept if lengths[i] > P]
    assert c.row_steps == 2 * G * P + len(survivors) * (max(lengths[i] for i in survivors) - P)


def test_the_prefix_hidden_state_is_the_one_the_last_prefix_token_was_drawn_from(engine):
    """view.hidden[r]: lm_head's input at the step that drew row r's last prefix token, which is
    `output_hidden_states[-1]` of a teacher-forced forward of prompt + prefix at the position
    before that token."""
    views = []
    seg = engine.rollout_segmented(_samples(), G, RC, seed=3, prefix_tokens=P, keep=_keep_all(views))
    view = views[0]
    n = torch.tensor([len(t) for t in view.tokens])
    assert (n < P).any()  # some rows stopped inside the prefix: their state is the stop token's step
    ids = seg.output.completion_ids[:, :P]
    kw = join_prompt_completion(repeat_prompts(seg.output.prompt_inputs, G), ids,
                                (torch.arange(P) < n[:, None]).long())
    model = engine.model
    with torch.no_grad():
        states = model(**kw, output_hidden_states=True).hidden_states[-1]  # (N, L + P, H), after the final norm
    width = seg.output.prompt_inputs["input_ids"].shape[1]
    ref = states[torch.arange(len(n)), width + n - 2].float()  # the position that predicts token n
    torch.testing.assert_close(view.hidden, ref, rtol=0, atol=1e-4)
    assert view.hidden.shape == (2 * G, model.config.get_text_config().hidden_size)


def test_multinomial_is_the_same_only_while_the_batch_is(engine):
    rc = dataclasses.replace(RC, sampler="multinomial")
    whole = engine.rollout(_samples(), G, rc, seed=0)
    lengths = whole.completion_mask.sum(1).tolist()
    assert min(lengths) < P < max(lengths)  # a row stopped inside the prefix: it rides along, done

    def keep_drawing(view):  # a keep that draws from torch's global stream: restored after it
        torch.rand(7)
        return [True] * len(view.tokens)

    _assert_same(engine.rollout_segmented(_samples(), G, rc, seed=0, prefix_tokens=P, keep=keep_drawing).output, whole)
    dropped = next(i for i in range(2 * G) if lengths[i] > P)  # a row still generating: the batch shrinks
    keep = [i != dropped for i in range(2 * G)]
    seg = engine.rollout_segmented(_samples(), G, rc, seed=0, prefix_tokens=P, keep=lambda v: keep)
    kept = [i for i in range(2 * G) if keep[i]]
    prefixes = [whole.completions[i].token_ids[:P] for i in kept]
    assert [c.token_ids[:P] for c in seg.output.completions] == prefixes  # the prefixes are today's
    assert [c.token_ids for c in seg.output.completions] != [whole.completions[i].token_ids for i in kept]  # not after


def test_greedy_and_a_prefix_past_the_budget(engine):
    """Greedy draws nothing: segmented is the same; a prefix at max_new_tokens is one segment."""
    whole = engine.rollout(_samples(), G, RC, seed=3, greedy=True)
    seg = engine.rollout_segmented(_samples(), G, RC, seed=3, prefix_tokens=P, keep=_keep_all([]), greedy=True)
    _assert_same(seg.output, whole)
    whole = engine.rollout(_samples(), G, RC, seed=3)
    seg = engine.rollout_segmented(_samples(), G, RC, seed=3, prefix_tokens=MAX + 5, keep=_keep_all([]))
    _assert_same(seg.output, whole)
    with pytest.raises(ValueError, match="prefix_tokens=0"):
        engine.rollout_segmented(_samples(), G, RC, seed=3, prefix_tokens=0, keep=_keep_all([]))
    with pytest.raises(ValueError, match="3 decisions for 8 rows"):
        engine.rollout_segmented(_samples(), G, RC, seed=3, prefix_tokens=P, keep=lambda v: [True] * 3)


def test_sharded_parameters_are_refused(engine, monkeypatch):
    """A rank with no survivor would leave the others waiting in the continuation's all-gathers."""
    import mmrlvr.rollout.segmented as segmented

    monkeypatch.setattr(segmented, "synced_generation", lambda model: True)
    with pytest.raises(NotImplementedError, match="sharded parameters"):
        engine.rollout_segmented(_samples(), G, RC, seed=3, prefix_tokens=P, keep=_keep_all([]))
