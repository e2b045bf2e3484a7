"""DBB (Beta-Bernoulli baseline): three visits by hand, NaN, scale none, include_current False; the
registered estimator `dbb` by hand, and the same numbers by algo.advantage=dbb and the enabled switch."""

from __future__ import annotations

import math

import pytest
import torch

from mmrlvr.methods.dbb.posteriors import dbb

NAN = float("nan")
T = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731


def test_three_visits_with_lam_hand_computed():
    # two prompts, lam 0.8, eps 0; prompt 0 starts at the prior (1, 1), prompt 1 at (2, 5)
    alpha, beta = T([1.0, 2.0]), T([1.0, 5.0])
    # visit 1: p0 r = [1, 0, 0, 1]: alpha = .8 + 2 = 2.8, beta = .8 + 2 = 2.8, p = .5, sd = .5 -> +-1
    #          p1 r = [0, 0, 0, 0]: alpha = 1.6, beta = 4 + 4 = 8, p = 1.6 / 9.6 = 1/6,
    #          sd = sqrt(1/6 * 5/6) = .372678 -> (0 - 1/6) / .372678 = -.447214 (all-equal: not zero)
    adv, alpha, beta = dbb(T([[1, 0, 0, 1], [0, 0, 0, 0]]), alpha, beta, lam=0.8, eps=0.0)
    assert torch.allclose(alpha, T([2.8, 1.6])) and torch.allclose(beta, T([2.8, 8.0]))
    assert torch.allclose(adv, T([[1, -1, -1, 1], [-0.447214] * 4]), atol=1e-6)
    # visit 2: p0 r = [1, 1, 1, 1]: alpha = 2.24 + 4 = 6.24, beta = 2.24, p = 6.24 / 8.48 = .735849,
    #          sd = sqrt(.735849 * .264151) = .440880 -> (1 - .735849) / .440880 = .599145 each
    #          p1 r = [0, 1, 0, 0]: alpha = 1.28 + 1 = 2.28, beta = 6.4 + 3 = 9.4, p = 2.28 / 11.68 = .195205,
    #          sd = .396356 -> 0: -.492497, 1: (1 - .195205) / .396356 = 2.030470
    adv, alpha, beta = dbb(T([[1, 1, 1, 1], [0, 1, 0, 0]]), alpha, beta, lam=0.8, eps=0.0)
    assert torch.allclose(alpha, T([6.24, 2.28])) and torch.allclose(beta, T([2.24, 9.4]))
    assert torch.allclose(adv, T([[0.599145] * 4, [-0.492497, 2.030470, -0.492497, -0.492497]]), atol=1e-5)
    # visit 3 with a NaN in each: p0 r = [0, nan, 0, 1]: n = 3, s = 1: alpha = 4.992 + 1 = 5.992,
    #          beta = 1.792 + 2 = 3.792, p = 5.992 / 9.784 = .612428, sd = .487196 -> 0: -1.257048, 1: .795515
    #          p1 r = [1, 1, 0, nan]: alpha = 1.824 + 2 = 3.824, beta = 7.52 + 1 = 8.52, p = .309786,
    #          sd = .462409 -> 1: 1.492660, 0: -.669945; the NaN gets 0
    adv, alpha, beta = dbb(T([[0, NAN, 0, 1], [1, 1, 0, NAN]]), alpha, beta, lam=0.8, eps=0.0)
    assert torch.allclose(alpha, T([5.992, 3.824])) and torch.allclose(beta, T([3.792, 8.52]))
    assert torch.allclose(adv, T([[-1.257048, 0.0, -1.257048, 0.795515], [1.492660, 1.492660, -0.669945, 0.0]]),
                          atol=1e-5)


def test_default_lam_eps_and_scale_none():
    # lam .9: alpha = .9 * 3 + 1 = 3.7, beta = .9 * 1 + 2 = 2.9, p = 3.7 / 6.6 = .560606
    r = T([[1, 0, 0]])
    adv, a, b = dbb(r, T([3.0]), T([1.0]), scale="none")
    assert a.item() == pytest.approx(3.7) and b.item() == pytest.approx(2.9)
    assert torch.allclose(adv, T([[1 - 3.7 / 6.6, -3.7 / 6.6, -3.7 / 6.6]]))
    # scale std with the default eps 1e-6: divided by sqrt(p (1 - p)) + 1e-6
    adv, _, _ = dbb(r, T([3.0]), T([1.0]))
    p = 3.7 / 6.6
    assert adv[0, 0].item() == pytest.approx((1 - p) / (math.sqrt(p * (1 - p)) + 1e-6), rel=1e-12)


def test_eps_is_added_to_the_std():
    # prior (1, 1), r = [1, 0], lam 1: alpha = beta = 2, p = .5, sd = .5; eps .5 -> +-.5 / 1
    adv, _, _ = dbb(T([[1, 0]]), T([1.0]), T([1.0]), lam=1.0, eps=0.5)
    assert torch.allclose(adv, T([[0.5, -0.5]]))


def test_include_current_false_uses_the_old_posterior_but_still_updates():
    # prior (3, 1): p = .75 before the visit; r = [0, 0, 0, 0] -> alpha = 2.4, beta = .8 + 4 = 4.8
    r = T([[0, 0, 0, 0]])
    adv, a, b = dbb(r, T([3.0]), T([1.0]), lam=0.8, eps=0.0, include_current=False)
    # (0 - .75) / sqrt(.75 * .25) = -.75 / .433013 = -1.732051
    assert torch.allclose(adv, T([[-1.732051] * 4]), atol=1e-6)
    assert a.item() == pytest.approx(2.4) and b.item() == pytest.approx(4.8)
    # include_current True: p = 2.4 / 7.2 = 1/3 -> (0 - 1/3) / sqrt(2/9) = -.707107
    adv, _, _ = dbb(r, T([3.0]), T([1.0]), lam=0.8, eps=0.0)
    assert torch.allclose(adv, T([[-0.707107] * 4]), atol=1e-6)


def test_all_nan_group_decays_and_gets_zeros():
    adv, a, b = dbb(T([[NAN, NAN]]), T([2.0]), T([4.0]), lam=0.5)
    assert torch.equal(adv, T([[0.0, 0.0]])) and a.item() == 1.0 and b.item() == 2.0


@pytest.mark.parametrize("kwargs, word", [
    ({"lam": 0.0}, "lam"), ({"lam": 1.5}, "lam"), ({"eps": -1.0}, "eps"), ({"scale": "mad"}, "scale"),
])
def test_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        dbb(T([[1.0, 0.0]]), T([1.0]), T([1.0]), **kwargs)


def test_bad_shapes_and_values():
    with pytest.raises(ValueError, match=r"\(B, G\)"):
        dbb(T([1.0, 0.0]), T([1.0]), T([1.0]))
    with pytest.raises(ValueError, match=r"\(2,\)"):
        dbb(T([[1.0], [0.0]]), T([1.0]), T([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        dbb(T([[2.0, 0.0]]), T([1.0]), T([1.0]))
    with pytest.raises(ValueError, match="> 0"):
        dbb(T([[1.0, 0.0]]), T([0.0]), T([1.0]))


def _visits(lam: float, g: int, n: int, right: float, include_current: bool = True):
    """(alpha, beta) after n groups of g rewards all equal to `right` (1: all correct, 0: all wrong)."""
    a, b = T([1.0]), T([1.0])
    for _ in range(n):
        _, a, b = dbb(T([[right] * g]), a, b, lam=lam, include_current=include_current)
    return a, b


def test_the_stated_range_of_a_right_wrong_reward():
    """docs/explanation/sample-efficiency.md: with right/wrong rewards, G scorable completions and
    include_current, every advantage lies within +-sqrt(G / (1 - lam) - 1) (8.89 at G = 8, lam
    0.9; GRPO's is (G - 1) / sqrt(G) = 2.47), approached after many all-correct (or all-wrong) visits."""
    g, lam = 8, 0.9
    bound = math.sqrt(g / (1 - lam) - 1)
    assert bound == pytest.approx(8.888, abs=1e-3)
    # the figure: 39 all-correct visits, then 7 right of 8: alpha 0.9^39 + 80 (1 - 0.9^39) = 78.70,
    # alpha' = 0.9 * 78.70 + 7 = 77.83, beta' = 0.9 * 0.9^39 + 1 = 1.0148: -sqrt(77.83 / 1.0148) = -8.757
    a, b = _visits(lam, g, 39, 1.0)
    adv, _, _ = dbb(T([[1.0] * 7 + [0.0]]), a, b, lam=lam)
    assert adv[0, 7].item() == pytest.approx(-8.757, abs=1e-3)
    for n in (1, 10, 39, 500):
        a, b = _visits(lam, g, n, 1.0)
        low, _, _ = dbb(T([[1.0] * 7 + [0.0]]), a, b, lam=lam)
        a, b = _visits(lam, g, n, 0.0)
        high, _, _ = dbb(T([[1.0] + [0.0] * 7]), a, b, lam=lam)  # the mirror: one right after all-wrong visits
        assert -bound <= low.min().item() and high.max().item() <= bound
    assert low.min().item() == pytest.approx(-bound, abs=1e-4) and high.max().item() == pytest.approx(bound, abs=1e-4)
    # include_current: false has no such bound: the old beta decays as lam^n
    a, b = _visits(lam, g, 200, 1.0, include_current=False)
    off, _, _ = dbb(T([[1.0] * 7 + [0.0]]), a, b, lam=lam, include_current=False)
    assert off.min().item() < -1000


# ------------------------------------------------------------------ dbb as a registered estimator

def _stats(**posteriors):
    """Per-prompt statistics holding the given (alpha, beta) posteriors."""
    from mmrlvr.data.sources import PromptStats

    stats = PromptStats()
    for sid, ab in posteriors.items():
        stats.extra(sid)["dbb"] = list(ab)
    return stats


def test_the_registered_estimator_hand_computed_with_nan_and_a_bonus():
    from mmrlvr.algos.advantages import ADVANTAGES, EstimatorContext, estimate
    from mmrlvr.methods.dbb.posteriors import DbbOptions

    assert "dbb" in ADVANTAGES.names()
    # rewards hold the verifiers' [1, 0, nan] / [.5, 0, 0] plus a bonus on each group's best answer
    bonus = T([[0.5, 0.0, 0.0], [0.25, 0.0, 0.0]])
    rewards = T([[1.0, 0.0, NAN], [0.5, 0.0, 0.0]]) + bonus
    stats = _stats(a=(3.0, 1.0))  # b: first visit, the prior (1, 1)
    ctx = EstimatorContext(["a", "b"], 4, stats, bonus=bonus, settings=DbbOptions(lam=0.5, eps=0.0))
    adv = estimate("dbb", rewards, ctx)
    # a: n 2, s 1 (the verifier's, bonus left out): alpha .5 * 3 + 1 = 2.5, beta .5 * 1 + 1 = 1.5, p = .625,
    #    sd = sqrt(.625 * .375) = .484123; 1 + .5 (the bonus moves the advantage): .875 / .484123 = 1.807392;
    #    0: -.625 / .484123 = -1.290994; the NaN gets 0
    # b: n 3, s .5 (not .75): alpha .5 + .5 = 1, beta .5 + 2.5 = 3, p = .25, sd = sqrt(.25 * .75) = .433013;
    #    .5 + .25 - .25 = .5 -> 1.154701; 0: -.25 / .433013 = -.577350
    assert torch.allclose(adv, T([[1.807392, -1.290994, 0.0], [1.154701, -0.577350, -0.577350]]), atol=1e-6)
    assert stats.extra("a")["dbb"] == pytest.approx([2.5, 1.5]) and stats.extra("b")["dbb"] == pytest.approx([1.0, 3.0])


def test_the_estimator_says_what_its_context_lacks():
    from mmrlvr.algos.advantages import EstimatorContext, estimate
    from mmrlvr.methods.dbb.posteriors import DbbOptions

    r = T([[1.0, 0.0]])
    for ctx in (None, EstimatorContext(["a"], 1, None, settings=DbbOptions())):
        with pytest.raises(ValueError, match=r"advantage estimator 'dbb' needs the run's per-prompt statistics "
                                             r"\(EstimatorContext.prompt_stats\)"):
            estimate("dbb", r, ctx)
    with pytest.raises(ValueError, match=r"advantage estimator 'dbb' needs its settings \(EstimatorContext.settings"):
        estimate("dbb", r, EstimatorContext(["a"], 1, _stats()))


def _uneven_batch(ids, groups, bonus_groups):
    """A step's batch of groups of unequal size (NaN-padded), the bonus inside its rewards."""
    from mmrlvr.algos.advantages import pad_groups
    from mmrlvr.types import RolloutBatch, Sample

    rewards, sizes = pad_groups([torch.tensor(g) for g in groups])
    bonus = pad_groups([torch.tensor(b) for b in bonus_groups])[0]
    n = sum(sizes)
    return RolloutBatch([Sample(i, (), None) for i in ids], {}, torch.zeros(n, 2, dtype=torch.long), torch.ones(n, 2),
                        torch.zeros(n, dtype=torch.bool), rewards + bonus, [""] * n, [None] * n, {}, None, sizes,
                        bonus=bonus)


def test_advantage_dbb_is_the_enabled_switch_and_the_formula_before_it_was_registered():
    """algo.advantage=dbb and sample_efficiency.dbb.enabled=true train on the same numbers, which are
    those of the training step's own DBB branch before dbb was an estimator (groups of 4, 2 and 5)."""
    from mmrlvr.algos.advantages import EstimatorContext, flatten_groups
    from mmrlvr.methods.dbb.posteriors import dbb_advantages
    from mmrlvr.checks.resolve import resolve_config
    from mmrlvr.config import load_config
    from mmrlvr.methods.dbb.method import dbb_options
    from mmrlvr.recipe.step import advantages_for

    def old_branch(batch, cfg, ctx):  # train/step.py's `if cfg.sample_efficiency.dbb.enabled:` branch
        bonus = batch.bonus if batch.bonus is not None else torch.zeros_like(batch.rewards)
        adv = dbb_advantages(batch.rewards.clone() - bonus, ctx, dbb_options(cfg), bonus=bonus)
        return flatten_groups(adv, batch.group_sizes).reshape(-1, 1)

    common = ["sample_efficiency.dbb.lam=0.5", "sample_efficiency.dbb.eps=0",
              "rewards=[{verifier: count, weight: 0.5}, {verifier: format, weight: 1.5}]"]  # maximum reward 2
    named = resolve_config(load_config(None, [*common, "algo.advantage=dbb"]))
    switched = resolve_config(load_config(None, [*common, "sample_efficiency.dbb.enabled=true"]))
    steps = [(["a", "b", "c"], [[2.0, 0.0, NAN, 2.0], [0.0, 0.0], [2.0, 2.0, 0.5, 0.0, 2.0]],
              [[0.3, 0.0, 0.0, 0.3], [0.0, 0.0], [0.2, 0.2, 0.0, 0.0, 0.2]]),
             (["b", "a"], [[1.5, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0]], [[0.0, 0.0, 0.0], [0.1] * 5])]
    stats = [_stats(), _stats(), _stats()]
    for step, (ids, groups, bonus) in enumerate(steps, 1):
        batch = _uneven_batch(ids, groups, bonus)
        a = advantages_for(batch, named, EstimatorContext(ids, step, stats[0]))
        b = advantages_for(batch, switched, EstimatorContext(ids, step, stats[1]))
        c = old_branch(batch, switched, EstimatorContext(ids, step, stats[2]))
        assert a.shape == (sum(len(g) for g in groups), 1) and torch.equal(a, b) and torch.equal(a, c)
    assert stats[0].state_dict() == stats[1].state_dict() == stats[2].state_dict()
    # by hand, step 1's group b (rewards / maximum 2: [0, 0], prior (1, 1), lam .5): alpha .5, beta 2.5,
    # p = 1/6, sd = sqrt(5) / 6 = .372678 -> (0 - 1/6) / .372678 = -.447214 for both
    ids, groups, bonus = steps[0]
    first = advantages_for(_uneven_batch(ids, groups, bonus), named, EstimatorContext(ids, 1, _stats()))
    assert first[4:6].view(-1).tolist() == pytest.approx([-0.447214] * 2, abs=1e-6)


def test_a_config_not_resolved_is_refused_not_trained_with_another_estimator():
    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.recipe.step import advantages_for
    from tests.train.step_helpers import with_algo

    cfg = load_config(None, ["sample_efficiency.dbb.enabled=true"])
    cfg = with_algo(cfg, resolve_algo(cfg.algo, cfg.rollout.max_new_tokens))  # algo.advantage: grpo
    batch = _uneven_batch(["a", "b"], [[1.0, 0.0], [1.0]], [[0.0, 0.0], [0.0]])
    with pytest.raises(ValueError, match="not resolved"):
        advantages_for(batch, cfg)
