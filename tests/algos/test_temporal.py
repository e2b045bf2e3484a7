"""T-GRPO and TGPO-style temporal bonuses against hand-computed values."""

import math

import pytest
import torch

from mmrlvr.algos.temporal import accuracy, temporal_bonus, tgpo_bonus, tgrpo_bonus

nan = math.nan


def t(rows):
    return torch.tensor(rows, dtype=torch.float)


def test_tgrpo_by_hand_with_edge_cases():
    ordered = t([
        [1, 1, 0, 0],  # p = 0.5, shuffled p~ = 0.25: 0.5 >= 0.25 -> the two correct get 0.3
        [1, 0, 0, 0],  # p = 0.25, p~ = 0.5: order did not help -> no bonus
        [1, 0, 1, 0],  # p = 0.5 = p~: mu = 1 and ">=" -> bonus
        [0, 0, 0, 0],  # all wrong: nothing to reward, p~ = 0.5 or not
        [1, nan, 1, 0],  # NaN counts as wrong: p = 0.5, p~ = 0 -> the two correct get 0.3
    ])
    shuffled = t([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    want = t([[.3, .3, 0, 0], [0, 0, 0, 0], [.3, 0, .3, 0], [0, 0, 0, 0], [.3, 0, .3, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, alpha=0.3, mu=1.0), want)
    # mu = 2: row 0 needs 0.5 >= 2 * 0.25 = 0.5 (yes); row 2 needs 0.5 >= 1.0 (no); p~ = 0 still passes
    want_mu2 = t([[.3, .3, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [.3, 0, .3, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, alpha=0.3, mu=2.0), want_mu2)


def test_tgrpo_is_per_prompt_not_per_batch():
    # prompt 0 alone: p = 1 >= p~ = 0 -> bonus. Adding a prompt whose shuffled answers are all
    # right (which would lift a batch-mean p~ above the batch-mean p) must not change prompt 0.
    a = tgrpo_bonus(t([[1, 1]]), t([[0, 0]]))
    b = tgrpo_bonus(t([[1, 1], [0, 0]]), t([[0, 0], [1, 1]]))
    assert torch.allclose(a[0], b[0]) and torch.allclose(a, t([[.3, .3]]))


def test_tgpo_by_hand():
    ordered = t([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    shuffled = t([[0, 0], [0, 0], [1, 0], [0, 0]])
    # gaps: 1 - 0 = 1, 0.5 - 0 = 0.5, max(0, 0.25 - 0.5) = 0, 0 - 0 = 0; largest gap 1
    # bonus = 0.3 * gap / 1 on correct answers: 0.3, 0.15, 0 (order did not help), 0 (all wrong)
    want = t([[.3, .3, .3, .3], [.15, .15, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    assert torch.allclose(tgpo_bonus(ordered, shuffled, alpha=0.3, mu=1.0), want)
    # p = p~ everywhere: no gap, no bonus (unlike T-GRPO, which pays the full alpha at p = p~)
    same = t([[1, 0], [1, 1]])
    assert torch.equal(tgpo_bonus(same, same), torch.zeros(2, 2))
    assert torch.allclose(tgrpo_bonus(same, same), t([[.3, 0], [.3, .3]]))


def test_stats_and_threshold():
    ordered, shuffled = t([[1.0, 0.6], [0.4, 1.0]]), t([[0.0], [1.0]])
    bonus, stats = temporal_bonus("tgrpo", ordered, shuffled, alpha=0.5, mu=1.0, threshold=1.0)
    # correct: [1, 0], [0, 1] -> p = 0.5, 0.5; p~ = 0, 1 -> prompt 0 only: bonus on (0, 0)
    assert torch.allclose(bonus, t([[.5, 0], [0, 0]]))
    assert stats["temporal/ordered_acc"] == pytest.approx(0.5) and stats["temporal/shuffled_acc"] == pytest.approx(0.5)
    assert stats["temporal/bonus_frac"] == pytest.approx(0.25)
    # a threshold of 0.5 also counts 0.6 as correct: p = 1 for prompt 0
    assert accuracy(ordered, 0.5).tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="known: tgrpo, tgpo"):
        temporal_bonus("tgrpo2", ordered, shuffled, 0.3, 1.0)
