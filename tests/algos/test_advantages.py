import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.algos.advantages import ADVANTAGES, dr_grpo, grpo, reinforce_pp, rloo


def test_grpo_hand_computed():
    # group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt((4 * 0.25) / 3) = 0.57735
    # advantages +-0.5 / 0.57735 = +-0.866025
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    adv = grpo(r, eps=0.0)
    assert torch.allclose(adv[0], torch.tensor([0.866025, -0.866025, -0.866025, 0.866025]), atol=1e-5)
    assert torch.equal(grpo(r)[1], torch.zeros(4))  # all-equal group -> zeros


def test_dr_grpo_and_rloo_hand_computed():
    r = torch.tensor([[3.0, 1.0, 2.0]])
    # mean 2 -> [1, -1, 0]
    assert torch.allclose(dr_grpo(r), torch.tensor([[1.0, -1.0, 0.0]]))
    # leave-one-out: 3 - (1+2)/2 = 1.5; 1 - (3+2)/2 = -1.5; 2 - (3+1)/2 = 0
    assert torch.allclose(rloo(r), torch.tensor([[1.5, -1.5, 0.0]]))


def test_reinforce_pp_hand_computed():
    r = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # centred: [[0.5, -0.5], [0, 0]]; batch mean 0, unbiased std sqrt(0.5/3) = 0.408248
    adv = reinforce_pp(r, eps=0.0)
    assert torch.allclose(adv, torch.tensor([[1.224745, -1.224745], [0.0, 0.0]]), atol=1e-5)


def test_nan_rewards_are_excluded_and_get_zero():
    r = torch.tensor([[1.0, float("nan"), 0.0, 0.0]])
    # valid [1, 0, 0]: mean 1/3, std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.57735
    adv = grpo(r, eps=0.0)
    assert adv[0, 1] == 0
    assert adv[0, 0].item() == pytest.approx((2 / 3) / math.sqrt(1 / 3), rel=1e-5)
    # rloo: 1 - 0 = 1; 0 - (1 + 0)/2 = -0.5
    assert torch.allclose(rloo(r), torch.tensor([[1.0, 0.0, -0.5, -0.5]]))
    assert not torch.isnan(dr_grpo(r)).any() and not torch.isnan(reinforce_pp(r)).any()


def test_loop_equals_vectorised():
    torch.manual_seed(0)
    r = torch.rand(5, 6)
    for b in range(5):
        row = r[b]
        mean, std = row.mean(), row.std()
        assert torch.allclose(grpo(r, eps=1e-6)[b], (row - mean) / (std + 1e-6), atol=1e-6)
        loo = torch.stack([row[i] - (row.sum() - row[i]) / 5 for i in range(6)])
        assert torch.allclose(rloo(r)[b], loo, atol=1e-6)


def test_registry_names():
    assert set(ADVANTAGES.names()) >= {"grpo", "dr_grpo", "rloo", "reinforce_pp", "dbb"}
    with pytest.raises(KeyError, match="known: dbb, dr_grpo, grpo"):
        ADVANTAGES.get("ppo")


def group_estimators() -> list[str]:
    """The estimators that read the rewards alone (a stateful one, dbb, gives all-equal groups
    non-zero advantages on purpose: tests/methods/dbb/test_dbb.py)."""
    return [name for name, fn in ADVANTAGES.items() if not getattr(fn, "uses_context", False)]


def test_group_estimators_are_the_four():
    assert group_estimators() == ["dr_grpo", "grpo", "reinforce_pp", "rloo"]


rewards = st.lists(st.lists(st.floats(-100, 100), min_size=2, max_size=8), min_size=1, max_size=6).filter(
    lambda rows: len({len(r) for r in rows}) == 1
)


@settings(max_examples=60, deadline=None)
@given(rewards)
def test_group_zero_mean(rows):
    r = torch.tensor(rows, dtype=torch.float64)
    for fn in (grpo, dr_grpo, rloo):
        adv = fn(r)
        assert torch.allclose(adv.mean(dim=1), torch.zeros(len(rows), dtype=torch.float64), atol=1e-6)


# A reward is a weighted sum of verifier parts (e.g. 0.2 * format + 1.0 * answer = 1.2): a group
# where every completion earned the same parts holds G copies of one float32 value.
_weights = st.lists(st.floats(0.01, 3.0), min_size=1, max_size=3)
_parts = st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=3, max_size=3)


@settings(max_examples=200, deadline=None)
@given(_weights, st.lists(st.tuples(_parts, st.booleans(), st.integers(0, 2**16)), min_size=1, max_size=6),
       st.integers(2, 16), st.booleans())
def test_all_equal_groups_get_exactly_zero_from_every_estimator(weights, groups, g, with_nan):
    rows, flat = [], []
    for parts, is_flat, seed in groups:
        value = sum(w * p for w, p in zip(weights, parts))
        if is_flat:
            row = [value] * g
            if with_nan:
                row[seed % g] = float("nan")  # an unscorable member does not make the group informative
        else:
            gen = torch.Generator().manual_seed(seed)
            row = (torch.rand(g, generator=gen) * 2).tolist()
        rows.append(row)
        flat.append(is_flat)
    r = torch.tensor(rows, dtype=torch.float32)
    for name in group_estimators():
        adv = ADVANTAGES.get(name)(r)
        assert torch.isfinite(adv).all(), name
        for b, is_flat in enumerate(flat):
            if is_flat:
                assert torch.equal(adv[b], torch.zeros(g)), (name, rows[b], adv[b])


def test_all_equal_group_of_0_3_measured_case():
    # eight copies of float32(0.1 + 0.2): the float32 mean is not exactly the value, so
    # (r - mean) / (std + eps) gave every member the same non-zero advantage
    r = torch.tensor([[0.1 + 0.2] * 8, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]], dtype=torch.float32)
    for name in group_estimators():
        assert torch.equal(ADVANTAGES.get(name)(r)[0], torch.zeros(8)), name
