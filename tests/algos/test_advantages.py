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
    assert set(ADVANTAGES.names()) >= {"grpo", "dr_grpo", "rloo", "reinforce_pp"}
    with pytest.raises(KeyError, match="known: dr_grpo, grpo"):
        ADVANTAGES.get("ppo")


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
