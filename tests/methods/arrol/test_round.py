"""arrol's round on the tiny model with real decoding: per group exactly G survivors, chosen as the
head's scores say (or the fallback), finished from their kept prefix (the survivors are the same rows
of the unpruned over-generated rollout: losing the prefix's cache or random stream between the two
segments changes them), each survivor's hidden state is its own; `learn`'s metrics by hand."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch
from PIL import Image

from mmrlvr.methods.arrol.pruning import balanced_survivors
from mmrlvr.config import RolloutConfig
from mmrlvr.methods.arrol.settings import ArrolConfig
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.rollout.segmented import SegmentCounts
from mmrlvr.methods.arrol.round import ArrolPruner, Pending
from mmrlvr.types import Sample

G, P, MAX = 2, 3, 10
M = 4  # G x over_generation 2
RC = RolloutConfig(max_new_tokens=MAX, temperature=1.2)


def _samples() -> list[Sample]:
    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    return [Sample("a", q("How many red shapes are there in this picture?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
            Sample("b", q("Hi"), 2, images=(Image.new("RGB", (112, 84), (30, 30, 200)),))]


@pytest.fixture(scope="module")
def engine(tiny):
    """Stop ids widened by the 12 commonest tokens, so rows stop inside the prefix, after it, or run out."""
    model, processor = tiny
    eng = HFRolloutEngine(model, processor)
    out = eng.rollout(_samples(), M, RC, seed=0)
    eng.stop_ids = [*eng.stop_ids, *(t for t, _ in Counter(out.completion_ids.flatten().tolist()).most_common(12))]
    return eng


def _pruner(trusted: bool, width: int) -> ArrolPruner:
    pruner = ArrolPruner(ArrolConfig(enabled=True, over_generation=2.0, prefix_tokens=P, min_labels=2), G)
    pruner.head._build(width)
    with torch.no_grad():
        pruner.head.w.copy_(torch.randn(width, generator=torch.Generator().manual_seed(3)))
    if trusted:  # a window the head ranks perfectly
        pruner.head.observe(torch.tensor([0.9, 0.1]), torch.tensor([1, 0]))
    return pruner


@pytest.mark.parametrize("trusted", [True, False])
def test_survivors_are_the_unpruned_rows_chosen_by_the_head(engine, trusted):
    width = engine.model.config.get_text_config().hidden_size
    pruner = _pruner(trusted, width)
    views = []
    score = pruner.head.score
    pruner.head.score = lambda h: views.append(h) or score(h)  # the (R, H) each call scored
    out, pending = pruner.generate(engine, _samples(), RC, seed=0)
    whole = engine.rollout(_samples(), M, RC, seed=0)  # every row to the end
    rows = pending.rows.tolist()
    assert len(rows) == 2 * G and [r // M for r in rows] == [0, 0, 1, 1]
    lengths = whole.completion_mask.sum(1)
    assert (lengths < P).any() and (lengths > P).any()  # rows stopped inside and after the prefix
    # the survivors, finished from their prefix, are those rows of the unpruned rollout
    assert [c.token_ids for c in out.completions] == [whole.completions[r].token_ids for r in rows]
    assert [c.sample_index for c in out.completions] == [0, 0, 1, 1]
    torch.testing.assert_close(out.sampler_logprobs, whole.sampler_logprobs[rows, : out.sampler_logprobs.shape[1]],
                               rtol=0, atol=1e-5)
    hidden = torch.cat(views)  # (2M, H): one call, rollout order
    scores = score(hidden)
    if trusted:  # per group the balanced survivors of the head's scores
        expect = [p * M + i for p in range(2) for i in balanced_survivors(scores[p * M:(p + 1) * M], G, 0.5)]
    else:  # fallback: the first G positions
        expect = [0, 1, M, M + 1]
    assert rows == expect and pending.trusted == trusted
    assert torch.equal(pending.hidden, hidden[rows]) and torch.equal(pending.scores, scores[rows])
    assert pending.counts.rows == 2 * M and pending.counts.kept == 2 * G


def test_learn_metrics_by_hand():
    pruner = ArrolPruner(ArrolConfig(enabled=True, prefix_tokens=3, positive_at=0.5, head_steps=1), 2, max_reward=2.0)
    counts = SegmentCounts(rows=8, kept=4, pruned_alive=3, tokens_generated=30, tokens_saved_max=21)
    pending = Pending(torch.randn(4, 5), torch.tensor([0.9, 0.2, 0.4, 0.6]), torch.tensor([5, 2, 7, 3]), counts, True)
    # rewards / 2 >= 0.5: labels 1, 0, 1, 1 (0.9 / 2 = 0.45 is a negative)
    m = pruner.learn(pending, torch.tensor([[2.0, 0.9], [1.0, 1.6]]))
    assert m["arrol/head_auroc"] == 1.0  # the negative (0.2) is below every positive (0.9, 0.4, 0.6)
    assert m["arrol/head_auroc_within"] == 1.0  # group 1: 0.9 (positive) over 0.2; group 2 is all positive
    assert m["arrol/survivor_pos_share"] == 0.75
    assert m["arrol/all_equal_groups"] == 0.0  # rewards differ in both groups (the labels of group 2 do not)
    assert m["arrol/tokens_generated"] == 30 and m["arrol/tokens_saved_max"] == 21
    # survivors still generating at the prefix (length > 3): 5 and 7, continuations 2 and 4, mean 3;
    # 3 pruned rows x 3 = 9
    assert m["arrol/tokens_saved"] == 9.0 and m["arrol/pruned_frac"] == 0.5
    assert m["arrol/head_trusted"] == 1.0
    assert pruner.head.seen == [(pytest.approx(0.9), 1), (pytest.approx(0.2), 0), (pytest.approx(0.4), 1),
                                (pytest.approx(0.6), 1)] and pruner.head.fits == 1
