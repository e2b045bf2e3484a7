"""T-GRPO and TGPO-style temporal bonuses against hand-computed values."""

import math

import pytest
import torch

from mmrlvr.methods.temporal_contrast.maths import accuracy, temporal_bonus, tgpo_bonus, tgrpo_bonus

nan = math.nan


def t(rows):
    return torch.tensor(rows, dtype=torch.float)


def test_tgrpo_by_hand_with_edge_cases():
    ordered = t([
        [1, 1, 0, 0],  # p = 0.5, shuffled p~ = 0.25: 0.5 > 0.25 -> the two correct get 0.3
        [1, 0, 0, 0],  # p = 0.25, p~ = 0.5: order did not help -> no bonus
        [1, 0, 1, 0],  # p = 0.5 = p~: strict ">" (Video-R1's paper) -> no bonus
        [0, 0, 0, 0],  # all wrong: nothing to reward, p~ = 0.5 or not
        [1, nan, 1, 0],  # NaN counts as wrong: p = 0.5, p~ = 0 -> the two correct get 0.3
    ])
    shuffled = t([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    want = t([[.3, .3, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [.3, 0, .3, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, alpha=0.3, mu=1.0), want)
    # mu = 2: row 0 needs 0.5 > 2 * 0.25 = 0.5 (no, equal); p~ = 0 still passes (row 4)
    want_mu2 = t([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [.3, 0, .3, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, alpha=0.3, mu=2.0), want_mu2)
    # mu = 0.8 (Video-R1's code): row 2 now passes, 0.5 > 0.4; row 1: 0.25 > 0.4 still fails
    want_mu08 = t([[.3, .3, 0, 0], [0, 0, 0, 0], [.3, 0, .3, 0], [0, 0, 0, 0], [.3, 0, .3, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, alpha=0.3, mu=0.8), want_mu08)


def test_partial_credit_is_paid_above_the_default_threshold():
    # tiou-like partial scores. The gate compares mean scores (Video-R1's acc_mean); the default
    # threshold 0.1, strict (Video-R1: reward > 0.1), decides who is paid:
    # ordered [0.45, 0.1, 0.0, 0.2]: p = 0.75 / 4 = 0.1875, paid [1, 0, 0, 1] (0.1 is not > 0.1)
    # shuffled [0.05, 0.3]: p~ = 0.175 -> 0.1875 > 0.175: bonus 0.3 on the two paid
    # shuffled [0.05, 0.4]: p~ = 0.225 -> no bonus
    ordered = t([[0.45, 0.1, 0.0, 0.2], [0.45, 0.1, 0.0, 0.2]])
    shuffled = t([[0.05, 0.3], [0.05, 0.4]])
    want = t([[.3, 0, 0, .3], [0, 0, 0, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled), want)
    # with threshold 0.4 only 0.45 is paid; the gate (means) is the same
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, threshold=0.4), t([[.3, 0, 0, 0], [0, 0, 0, 0]]))


def test_mu_compares_mean_scores_as_video_r1_not_shares_correct():
    """Video-R1 (grpo_trainer.py lines 614-617 at 59d65c3): acc_mean >= 0.8 * shuffled_acc_mean over
    the first reward's values. mu = 0.8, hand-computed:
    row 0: ordered mean (.5 + .5 + .05 + 0) / 4 = 0.2625 > 0.8 * 0.3 = 0.24 -> paid (the two 0.5);
           shares above 0.1 would say 0.5 > 0.8 * 1.0 = 0.8: no bonus
    row 1: ordered mean (1 + .15 + .15 + .15) / 4 = 0.3625 > 0.8 * 0.5 = 0.4 fails -> no bonus;
           shares would say 1.0 > 0.8: bonus on all four
    row 2: ordered mean 0.75 > 0: paid; gaps (TGPO) 0.2625 - 0.24 = 0.0225, 0, 0.75"""
    ordered = t([[0.5, 0.5, 0.05, 0.0], [1.0, 0.15, 0.15, 0.15], [1, 1, 1, 0]])
    shuffled = t([[0.3, 0.3], [0.5, 0.5], [0, 0]])
    want = t([[.3, .3, 0, 0], [0, 0, 0, 0], [.3, .3, .3, 0]])
    assert torch.allclose(tgrpo_bonus(ordered, shuffled, alpha=0.3, mu=0.8), want)
    scale = 0.0225 / 0.75  # row 0's gap over the largest
    want_tgpo = t([[.3 * scale, .3 * scale, 0, 0], [0, 0, 0, 0], [.3, .3, .3, 0]])
    assert torch.allclose(tgpo_bonus(ordered, shuffled, alpha=0.3, mu=0.8), want_tgpo, atol=1e-7)


def test_bonus_survives_dr_grpo_but_not_grpo_std():
    from mmrlvr.algos.advantages import estimate

    rewards = t([[1, 1, 0, 0]])  # binary verifier; p = 0.5 > p~ = 0 -> bonus 0.3 on the correct
    bonus = tgrpo_bonus(rewards, t([[0, 0]]))
    # grpo: (r - mean) / std is invariant to r -> 1.3 r: same advantages
    assert torch.allclose(estimate("grpo", rewards + bonus), estimate("grpo", rewards), atol=1e-5)
    # dr_grpo: r - mean = [.5, .5, -.5, -.5] -> with the bonus [.65, .65, -.65, -.65]
    assert torch.allclose(estimate("dr_grpo", rewards + bonus), t([[.65, .65, -.65, -.65]]))


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
    # p = p~ everywhere: no gap, no bonus (and none from T-GRPO's strict ">" either)
    same = t([[1, 0], [1, 1]])
    assert torch.equal(tgpo_bonus(same, same), torch.zeros(2, 2))
    assert torch.equal(tgrpo_bonus(same, same), torch.zeros(2, 2))


def test_stats_and_threshold():
    ordered, shuffled = t([[1.0, 0.6], [0.4, 1.0]]), t([[0.0], [1.0]])
    bonus, stats = temporal_bonus("tgrpo", ordered, shuffled, alpha=0.5, mu=1.0, threshold=0.9)
    # correct (> 0.9): [1, 0], [0, 1] -> p = 0.5, 0.5; p~ = 0, 1 -> prompt 0 only: bonus on (0, 0)
    assert torch.allclose(bonus, t([[.5, 0], [0, 0]]))
    assert stats["temporal/ordered_acc"] == pytest.approx(0.5) and stats["temporal/shuffled_acc"] == pytest.approx(0.5)
    assert stats["temporal/bonus_frac"] == pytest.approx(0.25)
    # a threshold of 0.5 also counts 0.6 as correct: p = 1 for prompt 0
    assert accuracy(ordered, 0.5).tolist() == [1.0, 0.5]
    # the default, 0.1, counts 0.4 too; exactly the threshold does not count (strict)
    assert accuracy(ordered).tolist() == [1.0, 1.0]
    assert accuracy(ordered, 0.4).tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="known: tgrpo, tgpo"):
        temporal_bonus("tgrpo2", ordered, shuffled, 0.3, 1.0)
