"""Stop tokens, truncation and the loss mask: the stop token is trained on, nothing after it is,
and `mask_truncated` removes exactly the truncated rows."""

import copy

import pytest
import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.config import RolloutConfig, load_config
from mmrlvr.rollout.hf import HFRolloutEngine, trim_at_stop
from mmrlvr.tasks import load_task
from mmrlvr.data.sources import SeededStream
from mmrlvr.train.learner import loss_mask
from mmrlvr.recipe.step import collect
from tests.train.step_helpers import run_update, with_algo
from mmrlvr.verifiers.score import InProcessScorer


def test_trim_at_stop_hand_computed():
    stop, pad = [7, 9], 5  # not 0: a pad of zeros would pass too
    new = torch.tensor([[3, 7, 4, 5],   # stops at column 1: keep [3, 7]
                        [9, 1, 7, 2],   # the first of several stop tokens ends it
                        [3, 4, 5, 6],   # no stop token: truncated, all 4 kept
                        [1, 2, 3, 9]])  # stops on the last column: finished, not truncated
    ids, mask, lengths, finished = trim_at_stop(new, stop, pad)
    assert lengths.tolist() == [2, 1, 4, 4]
    assert finished.tolist() == [True, True, False, True]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert ids.tolist() == [[3, 7, 5, 5], [9, 5, 5, 5], [3, 4, 5, 6], [1, 2, 3, 9]]


@pytest.fixture(scope="module")
def stopping(tiny):
    """The tiny model with its end-of-turn logit tied to a common token's, so that about half of
    the completions stop within 8 tokens and the rest are truncated."""
    model, processor = tiny
    model = copy.deepcopy(model)
    engine = HFRolloutEngine(model, processor)
    stop = engine.stop_ids[0]
    samples = load_task("counting", "train", 4, 0)
    probe = engine.rollout(samples, 4, RolloutConfig(max_new_tokens=8), seed=0)
    common = torch.bincount(probe.completion_ids[probe.completion_mask.bool()], minlength=2048).argmax()
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[stop] = head[common] + 0.5 * head[common].sign() * head[common].abs().mean()
    return model, processor, engine


def test_stop_token_is_in_the_mask_and_nothing_after_it(stopping):
    model, processor, engine = stopping
    samples = load_task("counting", "train", 4, 0)
    out = engine.rollout(samples, 4, RolloutConfig(max_new_tokens=8), seed=1)
    stops = torch.isin(out.completion_ids, torch.tensor(engine.stop_ids)) & out.completion_mask.bool()
    truncated = torch.tensor([c.truncated for c in out.completions])
    assert 0 < truncated.sum() < len(truncated)  # both kinds present
    for row, c in enumerate(out.completions):
        length = int(out.completion_mask[row].sum())
        assert out.completion_mask[row, :length].all() and not out.completion_mask[row, length:].any()
        assert c.token_ids == out.completion_ids[row, :length].tolist()
        if c.truncated:
            assert length == 8 and not stops[row].any()
        else:  # the stop token is the last masked token, and the only one
            assert c.token_ids[-1] in engine.stop_ids and stops[row].nonzero().flatten().tolist() == [length - 1]


def _batch(stopping, extra=()):
    model, processor, engine = stopping
    cfg = load_config(None, ["rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
                             "train.max_grad_norm=1e9", "rollout.sampler=multinomial", *extra])  # draws with both kinds of rows
    algo = resolve_algo(cfg.algo, 8)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(), with_algo(cfg, algo), seed=1)
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    return batch, cfg, algo


def test_mask_truncated_removes_exactly_the_truncated_rows(stopping):
    batch, cfg, _ = _batch(stopping, ["algo.mask_truncated=true"])
    assert 0 < batch.truncated.sum() < len(batch.truncated)
    mask = loss_mask(batch, resolve_algo(cfg.algo, 8))
    plain = loss_mask(batch, resolve_algo(load_config(None, []).algo, 8))
    for row in range(len(batch.truncated)):
        if batch.truncated[row]:
            assert not mask[row].any()
        else:
            assert torch.equal(mask[row], batch.completion_mask[row].float()) and mask[row].sum() > 0
    assert torch.equal(plain, batch.completion_mask.float())


def _delta(stopping, batch, cfg, algo):
    from accelerate import Accelerator

    model = copy.deepcopy(stopping[0]).train()
    before = [p.detach().clone() for p in model.parameters()]
    run_update(model, None, torch.optim.SGD(model.parameters(), lr=1.0), Accelerator(cpu=True), batch, cfg, algo,
           stopping[2].suppress_ids, seed=0)
    torch.set_num_threads(1)
    return torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])


def test_tokens_after_the_stop_do_not_change_the_update(stopping):
    batch, cfg, algo = _batch(stopping)
    base = _delta(stopping, batch, cfg, algo)
    assert base.abs().max() > 0
    junk = copy.copy(batch)
    junk.completion_ids = torch.where(batch.completion_mask.bool(), batch.completion_ids,
                                      torch.randint(20, 500, batch.completion_ids.shape))
    assert not torch.equal(junk.completion_ids, batch.completion_ids)
    assert torch.allclose(_delta(stopping, junk, cfg, algo), base, atol=1e-6)
    # while the stop token itself is trained on: changing it changes the update
    finished = (~batch.truncated).nonzero().flatten()
    swapped = copy.copy(batch)
    swapped.completion_ids = batch.completion_ids.clone()
    last = batch.completion_mask[finished].sum(1) - 1
    swapped.completion_ids[finished, last] = 100
    assert not torch.allclose(_delta(stopping, swapped, cfg, algo), base, atol=1e-6)
