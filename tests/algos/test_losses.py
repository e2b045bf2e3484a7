import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.algos.losses import aggregate, kl_penalty, policy_loss

# ratios r = exp(logprobs - old): [[1.5, 0.5], [1.0, 1.2]], advantages [+1, -1] per sequence
OLD = torch.zeros(2, 2)
LP = torch.log(torch.tensor([[1.5, 0.5], [1.0, 1.2]]))
ADV = torch.tensor([[1.0], [-1.0]])
MASK = torch.ones(2, 2)


def test_ppo_clip_token_mean_hand_computed():
    # per token max(-A r, -A clip(r, 0.8, 1.2)):
    #   (A=+1, r=1.5) -> max(-1.5, -1.2) = -1.2 (clipped high)
    #   (A=+1, r=0.5) -> max(-0.5, -0.8) = -0.5
    #   (A=-1, r=1.0) -> 1.0 ; (A=-1, r=1.2) -> 1.2
    # token-mean: (-1.2 - 0.5 + 1.0 + 1.2) / 4 = 0.125
    loss, stats = policy_loss(LP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx(0.125, abs=1e-6)
    assert stats["clip_frac_high"].item() == pytest.approx(0.25)
    assert stats["clip_frac_low"].item() == 0.0
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 0.5 + 1.0 + 1.2) / 4)
    # approx KL (k3 of old||new): mean(r - 1 - log r)
    k3 = sum(r - 1 - math.log(r) for r in (1.5, 0.5, 1.0, 1.2)) / 4
    assert stats["approx_kl"].item() == pytest.approx(k3, rel=1e-5)
    assert all(not v.requires_grad for v in stats.values())


def test_clip_higher():
    # clip_high 0.28: first token -> max(-1.5, -1.28) = -1.28; (-1.28 - 0.5 + 1 + 1.2) / 4 = 0.105
    loss, _ = policy_loss(LP, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(0.105, abs=1e-6)


def test_clip_low_fraction():
    # A = -1 with r = 0.5 < 0.8: clipped low; value max(0.5, 0.8) = 0.8
    loss, stats = policy_loss(torch.log(torch.tensor([[0.5]])), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.8)
    assert stats["clip_frac_low"].item() == 1.0 and stats["clip_frac_high"].item() == 0.0


def test_aggregations_hand_computed():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # per-token values [[-1.2, -0.5], [1.0, (masked)]]
    seq_mean, _ = policy_loss(LP, OLD, ADV, mask, aggregation="seq-mean-token-mean")
    # seq0 (-1.2 - 0.5) / 2 = -0.85; seq1 1.0 -> mean 0.075
    assert seq_mean.item() == pytest.approx(0.075, abs=1e-6)
    sum_norm, _ = policy_loss(LP, OLD, ADV, mask, aggregation="seq-mean-token-sum-norm", norm_length=4)
    # seq0 -1.7 / 4 = -0.425; seq1 1.0 / 4 = 0.25 -> mean -0.0875
    assert sum_norm.item() == pytest.approx(-0.0875, abs=1e-6)
    tok, _ = policy_loss(LP, OLD, ADV, mask)
    assert tok.item() == pytest.approx((-1.2 - 0.5 + 1.0) / 3, abs=1e-6)
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(torch.ones(1, 1), torch.ones(1, 1), "sum")


def test_gspo_sequence_ratio_and_gradient():
    lp = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_(True)
    # s = exp(mean(log 1.5, log 0.5)) = sqrt(0.75) = 0.866 (inside [0.8, 1.2]): loss = -A s = -0.866
    loss, _ = policy_loss(lp, torch.zeros(1, 2), torch.tensor([[1.0]]), torch.ones(1, 2), importance_level="sequence")
    assert loss.item() == pytest.approx(-math.sqrt(0.75), rel=1e-5)
    loss.backward()
    # d/d lp_t of token-mean(-A s_t) with s_t = sg(s) exp(lp_t - sg(lp_t)) is -s / T
    assert torch.allclose(lp.grad, torch.full((1, 2), -math.sqrt(0.75) / 2), atol=1e-6)


def test_kl_estimators_hand_computed():
    logp, ref = torch.zeros(1), torch.log(torch.tensor([0.5]))
    d = math.log(2)  # logp - ref
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(d)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * d * d)
    # k3: exp(ref - logp) - (ref - logp) - 1 = 0.5 + ln 2 - 1
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(0.5 + d - 1)
    assert kl_penalty(torch.zeros(1), torch.tensor([80.0]), "k3").item() == 10.0  # clamped
    with pytest.raises(ValueError, match="unknown KL kind"):
        kl_penalty(logp, ref, "k4")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.integers(0, 10_000),
       st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]))
def test_extra_padding_changes_nothing(n, t, pad, seed, aggregation):
    g = torch.Generator().manual_seed(seed)
    lp, old = torch.randn(n, t, generator=g) * 0.3, torch.randn(n, t, generator=g) * 0.3
    adv = torch.randn(n, 1, generator=g)
    mask = (torch.rand(n, t, generator=g) > 0.3).float()
    base, _ = policy_loss(lp, old, adv, mask, aggregation=aggregation, norm_length=7)
    junk = torch.randn(n, pad, generator=g) * 5
    padded, _ = policy_loss(torch.cat([lp, junk], 1), torch.cat([old, -junk], 1), adv,
                            torch.cat([mask, torch.zeros(n, pad)], 1), aggregation=aggregation, norm_length=7)
    assert torch.allclose(base, padded, atol=1e-6)


def _expected_grad(kind, theta, ref_logp):
    """E_{x ~ pi}[grad kl_penalty(log pi(x), log ref(x))] on a categorical, enumerated exactly:
    the sample distribution is fixed (detached), the estimator is differentiated, as in a loss."""
    logp = torch.log_softmax(theta, -1)
    per_x = kl_penalty(logp, ref_logp, kind)
    (grad,) = torch.autograd.grad((logp.exp().detach() * per_x).sum(), theta)
    return grad


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kl_estimators_expected_gradients_on_a_categorical(seed):
    g = torch.Generator().manual_seed(seed)
    theta = (torch.randn(6, generator=g) * 0.8).requires_grad_(True)
    ref_logp = torch.log_softmax(torch.randn(6, generator=g) * 0.8, -1)
    logp = torch.log_softmax(theta, -1)
    (reverse,) = torch.autograd.grad((logp.exp() * (logp - ref_logp)).sum(), theta, retain_graph=True)  # KL(pi||ref)
    (forward,) = torch.autograd.grad((ref_logp.exp() * (ref_logp - logp)).sum(), theta)  # grad KL(ref || pi)
    assert not torch.allclose(reverse, forward, atol=1e-3)  # the two directions are distinguishable here
    assert torch.allclose(_expected_grad("k1", theta, ref_logp), torch.zeros(6), atol=1e-6)  # regularises nothing
    assert torch.allclose(_expected_grad("k2", theta, ref_logp), reverse, atol=1e-6)
    assert torch.allclose(_expected_grad("k3", theta, ref_logp), forward, atol=1e-6)


def test_k1_in_the_loss_is_an_error_but_not_as_a_setting_without_kl():
    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import AlgoConfig

    with pytest.raises(ValueError, match="k1 estimator has zero expected gradient"):
        resolve_algo(AlgoConfig(algorithm="grpo", kl_coef=0.05, kl_kind="k1"), 16)
    assert resolve_algo(AlgoConfig(algorithm="grpo", kl_kind="k1"), 16).kl_coef == 0.0
    assert resolve_algo(AlgoConfig(algorithm="reinforce_pp"), 16).kl_kind == "k2"
    with pytest.raises(ValueError, match="kl_kind 'k5' unknown"):
        resolve_algo(AlgoConfig(algorithm="grpo", kl_kind="k5"), 16)


def test_clip_fractions_use_their_own_bound():
    # r = 1.25 with A > 0: inside clip-higher's 1.28 (not clipped), outside a symmetric 1.2 (clipped)
    lp, old, adv, mask = torch.log(torch.tensor([[1.25, 0.75]])), torch.zeros(1, 2), torch.tensor([[1.0]]), torch.ones(1, 2)
    _, higher = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    _, sym = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    assert higher["clip_frac_high"].item() == 0.0 and sym["clip_frac_high"].item() == 0.5
    # r = 0.75 with A < 0: below 1 - 0.2, clipped low whatever clip_high is
    _, low = policy_loss(lp, old, -adv, mask, clip_low=0.2, clip_high=0.28)
    assert low["clip_frac_low"].item() == 0.5 and low["clip_frac_high"].item() == 0.0


def test_lower_clip_bound_is_clip_low_with_asymmetric_clips():
    # A = -1, r = 0.75: loss max(-A r, -A clip(r, 1 - 0.1, 1 + 0.3)) = max(0.75, 0.9) = 0.9.
    # With the lower bound taken from clip_high it would be max(0.75, 0.7) = 0.75.
    lp, old = torch.log(torch.tensor([[0.75]])), torch.zeros(1, 1)
    loss, stats = policy_loss(lp, old, torch.tensor([[-1.0]]), torch.ones(1, 1), clip_low=0.1, clip_high=0.3)
    assert loss.item() == pytest.approx(0.9) and stats["clip_frac_low"].item() == 1.0
    # A = +1, r = 1.25 stays inside 1 + 0.3: -1.25 (unclipped), whatever clip_low is
    loss_hi, _ = policy_loss(torch.log(torch.tensor([[1.25]])), old, torch.tensor([[1.0]]), torch.ones(1, 1),
                             clip_low=0.1, clip_high=0.3)
    assert loss_hi.item() == pytest.approx(-1.25)


def test_a_row_without_tokens_is_not_a_sequence():
    """A fully padded row (a group member cut to nothing) counts in neither sequence mean."""
    v = torch.tensor([[1.0, 3.0, 5.0], [7.0, 7.0, 7.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert aggregate(v, m, "seq-mean-token-mean").item() == pytest.approx(2.0)  # (1 + 3) / 2, one sequence
    assert aggregate(v, m, "seq-mean-token-sum-norm", norm_length=3).item() == pytest.approx(4 / 3)


def test_sum_norm_divides_by_the_padded_width_by_default():
    """Dr. GRPO's constant: T (the batch's width, 3 here), not the number of rows (2)."""
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(v, m, "seq-mean-token-sum-norm").item() == pytest.approx((6 / 3 + 4 / 3) / 2)


def test_gspo_sequence_ratio_ignores_padding():
    """r_seq = exp(mean over valid tokens of log r) = sqrt(1.5 * 0.5); the padded token's ratio of
    50 must not enter it (it would push r_seq to 6.1, clipped to 1.2)."""
    lp = torch.log(torch.tensor([[1.5, 0.5, 50.0]]))
    loss, _ = policy_loss(lp, torch.zeros(1, 3), torch.ones(1, 1), torch.tensor([[1.0, 1.0, 0.0]]),
                          importance_level="sequence")
    assert loss.item() == pytest.approx(-math.sqrt(0.75), rel=1e-6)


def test_gspo_sequence_log_ratio_is_capped_at_10():
    """A negative advantage takes the unclipped -A r: r = exp(min(15, 10)), not exp(15)."""
    loss, _ = policy_loss(torch.tensor([[15.0]]), torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1),
                          importance_level="sequence")
    assert loss.item() == pytest.approx(math.exp(10.0), rel=1e-5)


def test_clip_fractions_count_only_the_side_the_advantage_clips():
    """r = 1.5 with A < 0 is not clipped high (the unclipped term wins); A = 0 clips nothing."""
    _, stats = policy_loss(torch.log(torch.tensor([[1.5]])), torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1))
    assert stats["clip_frac_high"].item() == 0 and stats["clip_frac"].item() == 0
    _, stats = policy_loss(torch.log(torch.tensor([[0.5, 1.5]])), torch.zeros(1, 2), torch.zeros(1, 1), torch.ones(1, 2))
    assert stats["clip_frac_low"].item() == stats["clip_frac_high"].item() == stats["clip_frac"].item() == 0


def test_dual_clip_bounds_negative_advantage_tokens_as_verl():
    """verl's compute_policy_loss_vanilla: for A < 0 the loss is min(max(-A r, -A clip(r)), -A c).
    At ratio 5 and A = -1 that is 3.0 with c = 3 (5.0 without), its gradient 0; A > 0 untouched."""
    import math

    lp = torch.tensor([[math.log(5.0), math.log(5.0), math.log(2.0)]], requires_grad=True)
    old = torch.zeros(1, 3)
    adv = torch.tensor([[-1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    plain, _ = policy_loss(lp, old, adv, mask, aggregation="seq-mean-token-sum-norm", norm_length=1.0)
    # -A r for A<0 (unclipped is larger): 5 and 2; A>0 at r=5: -clip(5) = -1.2
    assert plain.item() == pytest.approx(5.0 - 1.2 + 2.0)
    dual, stats = policy_loss(lp, old, adv, mask, aggregation="seq-mean-token-sum-norm", norm_length=1.0, dual_clip=3.0)
    assert dual.item() == pytest.approx(3.0 - 1.2 + 2.0)  # only the ratio-5 negative token is bounded
    assert stats["clip_frac_dual"].item() == pytest.approx(1 / 3)
    dual.backward()
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 2].item() == pytest.approx(2.0)  # d(-A r)/dlogp = r
    off, stats = policy_loss(lp, old, adv, mask, aggregation="seq-mean-token-sum-norm", norm_length=1.0, dual_clip=0)
    assert off.item() == pytest.approx(plain.item()) and "clip_frac_dual" not in stats


def test_dual_clip_is_on_by_default_and_validated():
    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import AlgoConfig, load_config
    from mmrlvr.checks.validate import config_errors

    assert resolve_algo(AlgoConfig(), 8).dual_clip == 3.0 and resolve_algo(AlgoConfig(algorithm="dapo"), 8).dual_clip == 3.0
    assert resolve_algo(AlgoConfig(dual_clip=0), 8).dual_clip == 0
    errors = config_errors(load_config("configs/quickstart.yaml", ["algo.dual_clip=0.5"]))
    assert any(e.startswith("algo.dual_clip=0.5") for e in errors)
