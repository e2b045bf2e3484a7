"""Token weighting and DAPO's overlong penalty on episodes: signals are computed on the whole episode
row (inserted text and images are context the forward reads) and weights fall on the policy's own
tokens only; the overlong penalty reads an episode's longest policy turn against max_new_tokens."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.algos.sampling import longest_run
from mmrlvr.config import Config
from mmrlvr.rollout.episodes import policy_mask_of, run_episodes
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.learner import LogprobOptions, rows_logprobs
from mmrlvr.methods.token_weighting.signals import black_fill
from mmrlvr.recipe.step import Round, _rectangular_batch, advantages_for, overlong_lengths
from mmrlvr.methods.token_weighting.weigher import weigh_tokens
from mmrlvr.types import Completion, RolloutBatch
from tests.rollout.test_episodes import _cfg, _prompts  # noqa: F401 - also registers test_zoom_then_ask


def _shaping_batch(policy: bool = True) -> RolloutBatch:
    """B=2 prompts x G=2, mixed lengths. Row 0: three turns of 3, 2 and 2 policy tokens between inserts
    of 2 and 1 tokens (10 tokens); row 1: one turn of 4; row 2: turns of 2 and 4 around a 3-token
    insert (9); row 3: turns of 2, 1 and 1 (6)."""
    pms = [[1, 1, 1, 0, 0, 1, 1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0, 0, 1, 1, 1, 1], [1, 1, 0, 1, 0, 1]]
    comps = [Completion(i // 2, "x", [7] * len(pm), truncated=False, policy_mask=pm if policy else None)
             for i, pm in enumerate(pms)]
    mask = torch.zeros(4, 10, dtype=torch.long)
    for i, pm in enumerate(pms):
        mask[i, : len(pm)] = 1
    return RolloutBatch([], {}, torch.zeros(4, 10, dtype=torch.long), mask, torch.zeros(4, dtype=torch.bool),
                        torch.ones(2, 2), ["x"] * 4, [None] * 4, {}, policy_mask=policy_mask_of(comps, mask.shape))


def test_longest_run_by_hand():
    m = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0, 1, 1], [0] * 10, [1] * 10, [0, 1, 1, 0, 1, 1, 1, 1, 0, 0]])
    assert longest_run(m).tolist() == [3, 0, 10, 4]
    assert longest_run(torch.zeros(2, 0)).tolist() == [0, 0]


def test_overlong_penalty_reads_the_longest_policy_turn():
    """max_new_tokens 4, buffer 2, factor 1: the penalty is -clamp((L - 2) / 2, 0, 1) of the longest
    policy turn L = 3, 4, 4, 2 -> -0.5, -1, -1, 0 (the whole rows, 10/4/9/6 tokens, would give
    -1, -1, -1, -1). Rewards all 1, dr_grpo (reward minus the group mean):
    group 0: 0.5, 0 -> +0.25, -0.25; group 1: 0, 1 -> -0.5, +0.5."""
    batch = _shaping_batch()
    assert overlong_lengths(batch).tolist() == [3, 4, 4, 2]
    cfg = Config()
    cfg.rollout = dataclasses.replace(cfg.rollout, max_new_tokens=4)
    cfg.algo = dataclasses.replace(cfg.algo, algorithm="dapo", advantage="dr_grpo", overlong_buffer=2, overlong_factor=1.0)
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, 4))
    adv = advantages_for(batch, cfg).flatten()
    torch.testing.assert_close(adv, torch.tensor([0.25, -0.25, -0.5, 0.5]))
    # one-turn rows (no policy mask): the completion's length, as before episodes existed
    assert overlong_lengths(_shaping_batch(policy=False)).tolist() == [10, 4, 9, 6]


@pytest.fixture(scope="module")
def episode_batch(tiny):
    """A real 3-turn episode batch: rows "a" get an enlarged crop (16 image tokens) after turn 1."""
    model, processor = tiny
    cfg = _cfg("test_zoom_then_ask", temperature=0.9)
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens))
    engine = HFRolloutEngine(model, processor)
    out = run_episodes(engine, _prompts(), 2, cfg.rollout, seed=3)
    rnd = Round(_prompts(), out, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), [None] * 4, torch.ones(2, dtype=torch.bool), {}, 0)
    return cfg, _rectangular_batch(rnd), engine.suppress_ids, black_fill(processor)


def test_entropy_topk_weighs_policy_tokens_only(tiny, episode_batch):
    """entropy_topk (top_frac 0.25): the signals' entropies on policy tokens are the learner's own
    forward's (prompt image and inserted crop both in it), 0 on inserted tokens; exactly
    ceil(0.25 x policy tokens) tokens get weight 1 (the highest entropies among policy tokens),
    none of them inserted."""
    model, _ = tiny
    cfg, batch, suppress, fill = episode_batch
    cfg = dataclasses.replace(cfg, token_weighting=dataclasses.replace(cfg.token_weighting, method="entropy_topk",
                                                                       top_frac=0.25))
    policy = (batch.completion_mask * batch.policy_mask).bool()
    inserted = batch.completion_mask.bool() & ~policy
    assert int(inserted[:2].sum(1).min()) > 16 and int(inserted[2:].sum(1).min()) >= 2  # the crop, the prompts
    adv = torch.ones(4, 1)
    tw = weigh_tokens(model, batch, adv, cfg, cfg.algo, suppress, step=1, fill=fill)
    ent = rows_logprobs(model, batch, [0, 1, 2, 3], LogprobOptions.of(cfg, suppress), with_entropy=True)[1].detach()
    torch.testing.assert_close(tw.signals["entropy"][policy], ent[policy], atol=1e-5, rtol=0)
    assert torch.equal(tw.signals["entropy"][inserted], torch.zeros(int(inserted.sum())))
    n_policy = int(policy.sum())
    k = math.ceil(0.25 * n_policy)
    assert int(tw.weights.sum()) == k and torch.equal(tw.weights[inserted], torch.zeros(int(inserted.sum())))
    chosen = tw.weights.bool()
    assert float(ent[chosen].min()) >= float(ent[policy & ~chosen].max())
    assert tw.metrics["tokens/weight_mean"] == pytest.approx(k / n_policy)


def test_vppo_counts_each_rows_policy_tokens(tiny, episode_batch):
    """VPPO keeps exactly ceil(0.4 x |o_i|) tokens of each response, |o_i| its policy tokens (not its
    inserted ones); visual dependency (the corrupted forward blacks out the crop's patches too) is 0
    on inserted tokens."""
    model, _ = tiny
    cfg, batch, suppress, fill = episode_batch
    cfg = dataclasses.replace(cfg, token_weighting=dataclasses.replace(cfg.token_weighting, method="vppo"))
    policy = (batch.completion_mask * batch.policy_mask).bool()
    tw = weigh_tokens(model, batch, torch.ones(4, 1), cfg, cfg.algo, suppress, step=1, fill=fill)
    dep = tw.signals["visual_dependency"]
    assert torch.equal(dep[~policy], torch.zeros(int((~policy).sum())))
    assert float(dep[policy].max()) > 0
    kept = (tw.weights > 0).sum(1).tolist()
    assert kept == [math.ceil(0.4 * n) for n in policy.sum(1).tolist()]
    assert torch.equal(tw.weights[~policy], torch.zeros(int((~policy).sum())))
