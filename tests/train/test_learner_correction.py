"""Rollout correction inside `Learner.update`: a sampler that under-rated some tokens (as a bf16
vLLM sampler may) gets those tokens' losses reweighed, and the drift is logged."""

import copy
import dataclasses
import math

import pytest
import torch
from accelerate import Accelerator

from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.train.learner import Learner
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import advantages_for, collect
from mmrlvr.verifiers.score import InProcessScorer

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0], [0.2, 0.0, 0.0, 0.0]])
SHIFT = 0.3  # the sampler's log-prob of every token of rows 0-7 is 0.3 below the learner's


@pytest.fixture(scope="module")
def setup(tiny):
    model, processor = tiny
    cfg = resolve_config(load_config(None, ["rollout.prompts_per_step=4", "rollout.group_size=4",
                                            "rollout.max_new_tokens=8", "train.max_grad_norm=1e9",
                                            "rollout.engine=vllm"]))  # the sampler is not the learner
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(), cfg, seed=0)
    batch.rewards = REWARDS.clone()
    return model, batch, cfg, engine.suppress_ids


def _delta(setup, mode, sampler, adv_scale=None):
    model, batch, cfg, suppress = setup
    cfg = dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, rollout_correction=mode))
    batch = copy.copy(batch)
    batch.sampler_logprobs = sampler
    adv = advantages_for(batch, cfg)
    if adv_scale is not None:
        adv = adv * adv_scale
    model = copy.deepcopy(model).train()
    before = [p.detach().clone() for p in model.parameters()]
    stats = Learner(cfg, model, torch.optim.SGD(model.parameters(), lr=1.0), Accelerator(cpu=True),
                    suppress).update(batch, adv, seed=0)
    torch.set_num_threads(1)
    return torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)]), stats


def test_token_tis_reweighs_the_under_rated_rows_and_logs_the_drift(setup):
    _, batch, cfg, _ = setup
    assert cfg.algo.rollout_correction == "token_tis"  # the vllm engine's default
    mask = batch.completion_mask.float()
    rows = (torch.arange(16) < 8).float().unsqueeze(1)
    shifted = batch.sampler_logprobs - SHIFT * rows * mask
    corrected, stats = _delta(setup, "token_tis", shifted)
    plain, _ = _delta(setup, "none", shifted)
    unshifted, _ = _delta(setup, "none", batch.sampler_logprobs)
    # `none` never reads the sampler in the loss: the update is the same with or without the shift
    assert torch.equal(plain, unshifted)
    # one update per batch: ratio 1, so a weight exp(0.3) = 1.35 (< cap 2) on every token of rows 0-7
    # is the same update as those rows' advantages times exp(0.3)
    scaled, _ = _delta(setup, "none", shifted, adv_scale=1.0 + (math.exp(SHIFT) - 1.0) * rows)
    assert (corrected - scaled).abs().max() <= 1e-5 * corrected.abs().max()
    assert (corrected - plain).abs().max() > 1e-3 * plain.abs().max()
    # drift, hand-computed from the token counts: kl_k1 = mean(sampler - learner) = -0.3 x share of
    # tokens in rows 0-7 (plus float rounding); the weight is exp(0.3) there and 1 elsewhere
    share = float((mask * rows).sum() / mask.sum())
    assert stats["rollout_correction/kl_k1"] == pytest.approx(-SHIFT * share, abs=1e-4)
    assert stats["rollout_correction/weight_mean"] == pytest.approx(1 + (math.exp(SHIFT) - 1) * share, abs=1e-4)
    assert stats["rollout_correction/capped_frac"] == 0.0
    assert stats["rollout_correction/ppl_sampler"] > stats["rollout_correction/ppl_learner"]


def test_a_correction_without_sampler_logprobs_is_refused(setup):
    with pytest.raises(ValueError, match="needs the sampler's log-probs"):
        _delta(setup, "token_tis", None)
