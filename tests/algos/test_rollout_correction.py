"""Rollout correction: hand-computed weights for every mode, validation, and the correction
moving an off-policy (shifted-temperature) sampler's gradient onto the on-policy one."""

import math

import pytest
import torch

from mmrlvr.algos.losses import rollout_correction_stats, rollout_correction_weights, policy_loss
from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.config import AlgoConfig

# two sequences of different lengths: 3 and 2 valid tokens; the padding holds values that would
# change every result if it were read (old - sampler = 3.0 and 9.0 there)
OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -0.2, 0.0, 0.0]])
SAMPLER = torch.tensor([[-1.5, -1.0, -0.5, -3.0], [-0.1, -0.6, -9.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
E = math.exp


def test_token_tis_truncates_at_the_cap_and_zeroes_padding():
    w = rollout_correction_weights(OLD, SAMPLER, MASK, "token_tis", cap=1.5)
    # old - sampler: [0.5, -1.0, 0.0 | pad], [-0.2, 0.4 | pad]; exp(0.5) = 1.6487 > 1.5 -> capped
    expected = torch.tensor([[1.5, E(-1.0), 1.0, 0.0], [E(-0.2), E(0.4), 0.0, 0.0]])
    assert torch.allclose(w, expected, atol=1e-6)
    assert not w.requires_grad


def test_token_mis_keeps_the_ratio_within_the_cap_and_zeroes_beyond():
    """TRL's token_mask: `ratio.masked_fill(ratio > cap, 0)`, the ratio itself kept below the cap."""
    w = rollout_correction_weights(OLD, SAMPLER, MASK, "token_mis", cap=1.5)
    # exp(0.5) = 1.65 > 1.5 -> 0; exp(-1.0), exp(0.0), exp(-0.2), exp(0.4) = 1.49 kept as they are
    assert torch.allclose(w, torch.tensor([[0.0, E(-1.0), 1.0, 0.0], [E(-0.2), E(0.4), 0.0, 0.0]]), atol=1e-6)


def test_token_rs_is_the_filter_alone():
    """verl's rejection sampling: 1 within the cap, 0 beyond, the ratio not applied."""
    w = rollout_correction_weights(OLD, SAMPLER, MASK, "token_rs", cap=1.5)
    assert torch.equal(w, torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]))


def test_seq_tis_seq_mis_and_seq_rs_share_the_sequence_ratio():
    # sequence sums over valid tokens: 0.5 - 1.0 + 0.0 = -0.5 -> 0.6065; -0.2 + 0.4 = 0.2 -> 1.2214 > cap 1.2
    tis = rollout_correction_weights(OLD, SAMPLER, MASK, "seq_tis", cap=1.2)
    assert torch.allclose(tis, torch.tensor([[E(-0.5)] * 3 + [0.0], [1.2, 1.2, 0.0, 0.0]]), atol=1e-6)
    mis = rollout_correction_weights(OLD, SAMPLER, MASK, "seq_mis", cap=1.2)
    assert torch.allclose(mis, torch.tensor([[E(-0.5)] * 3 + [0.0], [0.0] * 4]), atol=1e-6)  # the 2nd masked
    rs = rollout_correction_weights(OLD, SAMPLER, MASK, "seq_rs", cap=1.2)
    assert torch.equal(rs, torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("mode", ["none", "token_tis", "token_mis", "token_rs", "seq_tis", "seq_mis", "seq_rs"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_finite_sampler_log_probs_on_padding_change_nothing(mode, dtype):
    """NaN x 0 is NaN: padding is selected away with `where`, so a NaN or -inf the sampler left on
    padding leaves every weight and statistic as with finite padding; on a valid token a
    non-finite sampler value reads as ratio 1 (no correction), as TRL does."""
    old, mask = OLD.to(dtype), MASK
    clean = rollout_correction_weights(old, SAMPLER.to(dtype), mask, mode, cap=1.5)
    dirty_s = SAMPLER.clone()
    dirty_s[0, 3], dirty_s[1, 2], dirty_s[1, 3] = float("nan"), float("-inf"), float("inf")
    dirty = rollout_correction_weights(old, dirty_s.to(dtype), mask, mode, cap=1.5)
    assert torch.equal(dirty, clean) and torch.isfinite(dirty).all()
    stats = rollout_correction_stats(old, dirty_s.to(dtype), mask, dirty, mode, 1.5)
    assert all(torch.isfinite(v).all() for v in stats.values())
    on_valid = SAMPLER.clone()
    on_valid[0, 0] = float("nan")
    w = rollout_correction_weights(old, on_valid.to(dtype), mask, "token_mis", cap=1.5)
    assert w[0, 0].item() == 1.0 and torch.isfinite(w).all()


def test_none_is_the_mask_and_stats_are_hand_computed():
    assert torch.equal(rollout_correction_weights(OLD, SAMPLER, MASK, "none", cap=1.5), MASK.float())
    w = rollout_correction_weights(OLD, SAMPLER, MASK, "token_tis", cap=1.5)
    s = rollout_correction_stats(OLD, SAMPLER, MASK, w, "token_tis", 1.5)
    d = [0.5, -1.0, 0.0, -0.2, 0.4]  # old - sampler on the 5 valid tokens
    assert s["kl_k1"].item() == pytest.approx(sum(-x for x in d) / 5)  # 0.3 / 5 = 0.06
    assert s["kl_k3"].item() == pytest.approx(sum(E(x) - 1 - x for x in d) / 5, rel=1e-5)
    assert s["weight_mean"].item() == pytest.approx((1.5 + E(-1) + 1 + E(-0.2) + E(0.4)) / 5, rel=1e-6)
    assert s["capped_frac"].item() == pytest.approx(1 / 5)  # only exp(0.5) exceeds 1.5
    assert s["nll_learner"].item() == pytest.approx((1.0 + 2.0 + 0.5 + 0.3 + 0.2) / 5)
    assert s["nll_sampler"].item() == pytest.approx((1.5 + 1.0 + 0.5 + 0.1 + 0.6) / 5)


def test_mode_and_cap_are_validated_when_the_preset_resolves():
    assert resolve_algo(AlgoConfig(), 8).rollout_correction == "none"
    assert resolve_algo(AlgoConfig(), 8, engine="vllm").rollout_correction == "token_tis"
    assert resolve_algo(AlgoConfig(rollout_correction="seq_mis"), 8, engine="vllm").rollout_correction == "seq_mis"
    with pytest.raises(ValueError, match="rollout_correction 'token_is' unknown"):
        resolve_algo(AlgoConfig(rollout_correction="token_is"), 8)
    for cap in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="rollout_correction_cap"):
            resolve_algo(AlgoConfig(rollout_correction_cap=cap), 8)


def _gradient(logits, tokens, adv, weights=None):
    """d loss / d logits of the one-token policy loss on sampled `tokens` (N,) with advantages (N,)."""
    theta = logits.clone().requires_grad_(True)
    lp = torch.log_softmax(theta, -1)[tokens].unsqueeze(1)  # (N, 1)
    loss, _ = policy_loss(lp, lp.detach(), adv.unsqueeze(1), torch.ones_like(lp), correction=weights)
    loss.backward()
    return theta.grad


def test_shifted_temperature_sampler_is_corrected_towards_the_on_policy_gradient():
    """The learner samples at temperature 1, the sampler at 1.6 (a flatter distribution): token_tis
    reweighs the sampler's tokens by p / q, so the update's expectation is the on-policy one."""
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    reward = torch.tensor([1.0, 0.0, 0.5, 2.0, -1.0])  # the advantage of each token
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits / 1.6, -1)
    # on-policy gradient, exactly: -sum_x p(x) A(x) grad log p(x)
    theta = logits.clone().requires_grad_(True)
    (-(p * reward * torch.log_softmax(theta, -1)).sum()).backward()
    exact = theta.grad
    n = 200_000
    tokens = torch.multinomial(q, n, replacement=True, generator=g)
    old, sampler = torch.log(p)[tokens].unsqueeze(1), torch.log(q)[tokens].unsqueeze(1)
    # max p/q over tokens is 1.33 for these logits: a cap of 3 truncates nothing
    w = rollout_correction_weights(old, sampler, torch.ones_like(old), "token_tis", cap=3.0)
    corrected = _gradient(logits, tokens, reward[tokens], w)
    uncorrected = _gradient(logits, tokens, reward[tokens])
    err = lambda x: ((x - exact).norm() / exact.norm()).item()  # noqa: E731
    # sampling error of a mean over 2e5 draws: ~1/sqrt(n) relative, well under 3 %
    assert err(corrected) < 0.03
    assert err(uncorrected) > 0.15


def test_mis_keeps_a_ratio_exactly_at_the_cap():
    """token_mis masks ratios *above* the cap: a ratio of exactly 1 at cap 1 is kept, and not counted as capped."""
    zeros, mask = torch.zeros(1, 2), torch.ones(1, 2)
    w = rollout_correction_weights(zeros, zeros, mask, "token_mis", cap=1.0)
    assert w.tolist() == [[1.0, 1.0]]
    assert rollout_correction_stats(zeros, zeros, mask, w, "token_mis", cap=1.0)["capped_frac"].item() == 0
