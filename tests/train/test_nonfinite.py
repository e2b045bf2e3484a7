"""Non-finite values never reach the weights: a NaN the sampler left on padding changes nothing,
and an optimizer step whose gradient is not finite is skipped (weights and Adam moments as they
were), counted, and after `train.max_nonfinite_steps` in a row the run stops with one error."""

import copy
import dataclasses

import pytest
import torch
from accelerate import Accelerator

from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.train.learner import Learner
from mmrlvr.train.nonfinite import NonFiniteUpdateError
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import advantages_for, collect
from mmrlvr.verifiers.score import InProcessScorer

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0], [0.2, 0.0, 0.0, 0.0]])


def _setup(tiny, *overrides):
    model, processor = tiny
    cfg = resolve_config(load_config(None, ["rollout.prompts_per_step=4", "rollout.group_size=4",
                                            "rollout.max_new_tokens=8", *overrides]))
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(), cfg, seed=0)
    batch.rewards = REWARDS.clone()
    assert not bool(batch.completion_mask.all()), "the batch needs padding for these tests"
    return model, batch, cfg, engine.suppress_ids


def _nan_on_padding(batch):
    s = batch.sampler_logprobs.clone()
    s[~batch.completion_mask.bool()] = float("nan")
    return s


def _update(model, batch, cfg, suppress, adv=None, optimizer=None, learner=None):
    adv = advantages_for(batch, cfg) if adv is None else adv
    before = [p.detach().clone() for p in model.parameters()]
    learner = learner or Learner(cfg, model, optimizer, Accelerator(cpu=True), suppress)
    stats = learner.update(batch, adv, seed=0)
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    return delta, stats, learner


@pytest.mark.parametrize("overrides", [("rollout.engine=vllm", "algo.rollout_correction=token_mis"),
                                       ("algo.algorithm=dapo", "algo.max_rounds=1")],
                         ids=["correction", "sampler_as_pi_old"])
def test_nan_sampler_log_probs_on_padding_leave_the_update_as_it_was(tiny, overrides):
    """token_mis reads the sampler's log-probs in the weights; dapo on the HF engine reads them as
    pi_old. Either way NaN on padding gives the update of finite padding, bit for bit."""
    torch.manual_seed(0)
    model, batch, cfg, suppress = _setup(tiny, *overrides)
    dirty = copy.copy(batch)
    dirty.sampler_logprobs = _nan_on_padding(batch)
    results = []
    for b in (batch, dirty):
        m = copy.deepcopy(model).train()
        results.append(_update(m, b, cfg, suppress, optimizer=torch.optim.SGD(m.parameters(), lr=1.0))[:2])
    (clean_d, clean_s), (dirty_d, dirty_s) = results
    assert torch.isfinite(dirty_d).all() and clean_d.abs().max() > 0
    assert torch.equal(clean_d, dirty_d)
    assert dirty_s["actor/nonfinite_skipped"] == 0.0 and dirty_s["loss/policy"] == clean_s["loss/policy"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_non_finite_gradient_skips_the_step_and_too_many_in_a_row_stop_the_run(tiny, dtype):
    model, batch, cfg, suppress = _setup(tiny, "train.max_nonfinite_steps=2")
    model = copy.deepcopy(model).to(dtype).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    adv = advantages_for(batch, cfg)
    poisoned = adv.clone()
    poisoned[2] = float("nan")  # one row's advantage: the loss, and every gradient, NaN
    d, s, learner = _update(model, batch, cfg, suppress, adv=adv, optimizer=opt)  # a finite step first
    assert s["actor/nonfinite_skipped"] == 0.0 and d.abs().max() > 0
    moments = {k: v.clone() for k, v in opt.state[next(iter(model.parameters()))].items()}
    d, s, _ = _update(model, batch, cfg, suppress, adv=poisoned, learner=learner)
    assert torch.equal(d, torch.zeros_like(d))  # weights untouched
    after = opt.state[next(iter(model.parameters()))]
    assert all(torch.equal(moments[k], after[k]) for k in moments)  # Adam's moments and step untouched
    assert s["actor/nonfinite_skipped"] == 1.0 and all(p.grad is None for p in model.parameters())
    d, s, _ = _update(model, batch, cfg, suppress, adv=adv, learner=learner)  # a finite step resets the count
    assert s["actor/nonfinite_skipped"] == 0.0 and torch.isfinite(d).all() and d.abs().max() > 0
    _update(model, batch, cfg, suppress, adv=poisoned, learner=learner)
    with pytest.raises(NonFiniteUpdateError, match="2 optimizer steps in a row had a non-finite"):
        _update(model, batch, cfg, suppress, adv=poisoned, learner=learner)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_the_bound_is_validated():
    from mmrlvr.checks.validate import config_errors

    errors = config_errors(load_config(None, ["train.max_nonfinite_steps=0"]))
    assert any("train.max_nonfinite_steps" in e for e in errors)
