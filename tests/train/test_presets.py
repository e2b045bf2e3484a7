"""Each preset's defining mechanism changes the update (behaviour, not metric names).

One rollout batch of the tiny model (4 prompts x 4 completions) with a fixed reward matrix is
updated under each preset; SGD with no gradient clipping makes updates linear in the advantages
where that is the point of the check.
"""

import copy

import pytest
import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.config import load_config
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import collect
from tests.train.step_helpers import run_update, with_algo
from mmrlvr.verifiers.score import InProcessScorer

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0], [0.2, 0.0, 0.0, 0.0]])


@pytest.fixture(scope="module")
def setup(tiny):
    return make_setup(*tiny)


def make_setup(model, processor):
    cfg = load_config(None, ["rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
                             "rollout.sampler=multinomial",  # the draws the hand-set thresholds below were read from
                             "train.max_grad_norm=1e9"])
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(),
                    with_algo(cfg, resolve_algo(cfg.algo, 8)), seed=0)
    batch.rewards = REWARDS.clone()
    return model, batch, cfg, engine.suppress_ids


class CountingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


def _update(setup, algorithm, overrides=(), lr=1.0, ref=None, opt_cls=CountingSGD, rewards=None):
    """Parameter change, stats and optimizer steps of one `update` of a copy of the tiny model."""
    from accelerate import Accelerator

    model, batch, cfg, suppress = setup
    cfg = copy.deepcopy(cfg)
    cfg.algo.algorithm = algorithm
    for item in overrides:
        key, value = item.split("=")
        setattr(cfg.algo, key, type(getattr(resolve_algo(cfg.algo, 8), key))(value))
    algo = resolve_algo(cfg.algo, 8)
    batch = copy.copy(batch)
    batch.rewards = REWARDS.clone() if rewards is None else rewards
    model = copy.deepcopy(model).train()
    before = [p.detach().clone() for p in model.parameters()]
    opt = opt_cls(model.parameters(), lr=lr)
    stats = run_update(model, ref, opt, Accelerator(cpu=True), batch, cfg, algo, suppress, seed=0)
    torch.set_num_threads(1)
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    return delta, stats, opt


def _close(a, b, tol=1e-4):
    return (a - b).abs().max().item() <= tol * max(a.abs().max().item(), 1e-12)


def test_grpo_one_step_on_policy_and_invariant_to_reward_scale_per_group(setup):
    d1, s1, opt = _update(setup, "grpo")
    assert opt.steps == 1 and s1["actor/clip_frac"] == 0.0  # one update: ratio 1, nothing clipped
    d2, _, _ = _update(setup, "grpo", rewards=REWARDS * torch.tensor([[3.0], [0.5], [2.0], [7.0]]))
    assert _close(d1, d2)  # (r - mean) / std: a group's reward scale does not matter


def test_dr_grpo_is_not_std_normalised(setup):
    d1, _, _ = _update(setup, "dr_grpo")
    d2, _, _ = _update(setup, "dr_grpo", rewards=REWARDS * 2.0)
    assert _close(2.0 * d1, d2)  # r - mean: doubling rewards doubles the (linear, SGD) update
    g1, _, _ = _update(setup, "grpo")
    assert not _close(d1, g1, 1e-2)


def test_rloo_is_the_leave_one_out_baseline(setup):
    # r_i - mean_{j != i} r_j = G / (G - 1) (r_i - mean): with token-mean this is dr_grpo's
    # advantage times 4/3, so the SGD update is exactly 4/3 of it
    d, stats, opt = _update(setup, "rloo")
    d_ref, _, _ = _update(setup, "dr_grpo", ["aggregation=token-mean"])
    assert opt.steps == 1 and _close(d, d_ref * 4 / 3)


def test_dapo_takes_16_steps_and_clip_higher_acts(setup):
    d, stats, opt = _update(setup, "dapo", lr=0.3)
    assert opt.steps == 16  # one row per mini-batch here (16 rows)
    assert stats["actor/clip_frac_high"] > 0  # later mini-batches see a moved policy: ratio > 1.28
    # clip-higher: with 2 mini-batches of 8 rows and a step size that moves ratios by ~10-30%,
    # some positive-advantage tokens land in (1.2, 1.28]: clipped at 0.2, still pushed at 0.28
    d, stats, _ = _update(setup, "dapo", ["mini_batches=2"], lr=0.04)
    d_sym, stats_sym, _ = _update(setup, "dapo", ["mini_batches=2", "clip_high=0.2"], lr=0.04)
    assert stats_sym["actor/clip_frac_high"] > stats["actor/clip_frac_high"] > 0
    assert not _close(d, d_sym, 1e-1)  # the higher clip bound changes the update


def test_gspo_takes_4_steps_and_its_sequence_clip_acts(setup):
    d, stats, opt = _update(setup, "gspo", lr=0.3)
    assert opt.steps == 4
    assert stats["actor/clip_frac"] > 0  # sequence ratios leave [1 - 3e-4, 1 + 4e-4] after step 1
    d_tok, _, _ = _update(setup, "gspo", ["importance_level=token"], lr=0.3)
    assert not _close(d, d_tok, 1e-3)  # the sequence-level ratio changes the update


def test_reinforce_pp_kl_pulls_towards_the_reference(setup):
    model = setup[0]
    same = copy.deepcopy(model).eval().requires_grad_(False)
    d_same, s_same, _ = _update(setup, "reinforce_pp", ref=same)
    d_nokl, _, _ = _update(setup, "reinforce_pp", ["kl_coef=0.0"], ref=same)
    # k2 = d^2 / 2 has zero value and zero gradient where the policy is the reference
    assert s_same["loss/kl"] == pytest.approx(0.0, abs=1e-9) and _close(d_same, d_nokl)
    moved = copy.deepcopy(same)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    d_moved, s_moved, _ = _update(setup, "reinforce_pp", ["kl_coef=1.0"], ref=moved)
    d_moved0, _, _ = _update(setup, "reinforce_pp", ["kl_coef=0.0"], ref=moved)
    assert s_moved["loss/kl"] > 0 and not _close(d_moved, d_moved0, 1e-3)


def test_kl_keeps_zero_advantage_rows_in_the_forward(setup):
    """A flat group has zero advantage but its KL term still pulls towards the reference: with a
    KL, no row may be skipped (without one, zero-advantage rows are skipped)."""
    flat = REWARDS.clone()
    flat[3] = 1.0
    moved = copy.deepcopy(setup[0]).eval().requires_grad_(False)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    _, with_kl, _ = _update(setup, "reinforce_pp", ["kl_coef=1.0"], ref=moved, rewards=flat)
    _, without, _ = _update(setup, "grpo", rewards=flat)
    assert with_kl["actor/updated_seqs_frac"] == 1.0 and without["actor/updated_seqs_frac"] == 0.75


def _two_updates(setup, algorithm, overrides, ref=None, lr=0.05):
    """Stats of two successive `update`s of one copy of the model on a batch with all-equal
    groups: the policy term is 0, so only the KL or entropy term moves the weights."""
    from accelerate import Accelerator

    model, batch, cfg, suppress = setup
    cfg = copy.deepcopy(cfg)
    cfg.algo.algorithm = algorithm
    for key, value in overrides.items():
        setattr(cfg.algo, key, value)
    algo = resolve_algo(cfg.algo, 8)
    batch = copy.copy(batch)
    batch.rewards = torch.ones_like(REWARDS)
    model = copy.deepcopy(model).train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    first = run_update(model, ref, opt, Accelerator(cpu=True), batch, cfg, algo, suppress, seed=0)
    second = run_update(model, ref, opt, Accelerator(cpu=True), batch, cfg, algo, suppress, seed=1)
    torch.set_num_threads(1)
    return first, second


def test_kl_term_moves_the_policy_towards_the_reference(setup):
    """With zero advantages the only gradient is the KL's: one step must lower it (a KL added
    with the wrong sign would raise it)."""
    moved = copy.deepcopy(setup[0]).eval().requires_grad_(False)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    first, second = _two_updates(setup, "reinforce_pp", {"kl_coef": 1.0}, ref=moved)
    assert first["loss/kl"] > 0 and second["loss/kl"] < first["loss/kl"]


def test_entropy_bonus_raises_the_entropy(setup):
    """With zero advantages and entropy_coef > 0 the only gradient is the bonus: one step must
    raise the policy's entropy (a bonus with the wrong sign would lower it)."""
    first, second = _two_updates(setup, "grpo", {"entropy_coef": 1.0})
    assert second["actor/entropy"] > first["actor/entropy"]
