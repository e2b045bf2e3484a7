"""arrol's pure math against hand-computed values: rows per prompt, the survivors of a group, the
keep decisions of a call holding several groups (trusted head and fallback), AUROC, all-equal groups."""

import math

import pytest
import torch

from mmrlvr.methods.arrol.pruning import all_equal_share, auroc, balanced_survivors, rows_per_prompt, select_rows, within_group_auroc


@pytest.mark.parametrize("g,factor,m", [(4, 2.0, 8), (50, 1.1, 55), (3, 1.5, 5), (4, 1.0, 4), (6, 1.25, 8)])
def test_rows_per_prompt_is_the_ceiling(g, factor, m):
    # 3 x 1.5 = 4.5 -> 5; 6 x 1.25 = 7.5 -> 8; 50 x 1.1 = 55.00000000000001 in floats -> 55, not 56
    assert rows_per_prompt(g, factor) == m


S = torch.tensor([0.9, 0.1, 0.6, 0.4, 0.8, 0.2])  # by score: 0 > 4 > 2 > 3 > 5 > 1


@pytest.mark.parametrize("keep,rho,expect", [
    (4, 0.5, [0, 1, 4, 5]),   # k+ = 2: the top two (0, 4), then the two lowest (1, 5)
    (4, 0.75, [0, 1, 2, 4]),  # k+ = 3: 0, 4, 2; one lowest: 1
    (3, 0.5, [0, 1, 4]),      # k+ = round(1.5) = 2 (half to even): 0, 4; one lowest: 1
    (3, 0.25, [0, 1, 5]),     # k+ = round(0.75) = 1: 0; two lowest: 1, 5
    (2, 0.0, [1, 5]),         # no positive slots: the two lowest
    (2, 1.0, [0, 4]),         # only positive slots: the two highest
    (6, 0.5, [0, 1, 2, 3, 4, 5]),
])
def test_balanced_survivors_hand_computed(keep, rho, expect):
    assert balanced_survivors(S, keep, rho) == expect


def test_ties_go_to_the_lower_position():
    # all 0.5: the top slot is position 0, the lowest among the rest by (score, position) is 1
    assert balanced_survivors(torch.full((4,), 0.5), 2, 0.5) == [0, 1]
    # a tie for the top between 1 and 3 (0.7): 1 wins; the lowest of the rest: 0 (0.2)
    assert balanced_survivors(torch.tensor([0.2, 0.7, 0.3, 0.7]), 2, 0.5) == [0, 1]


def test_keep_more_than_there_are_is_refused():
    with pytest.raises(ValueError, match="keep=5 survivors of 4"):
        balanced_survivors(torch.zeros(4), 5, 0.5)


def test_select_rows_per_group_in_one_call():
    # two prompts of M = 3 rows, the second group's rows listed out of position order
    scores = torch.tensor([0.2, 0.9, 0.5, 0.7, 0.1, 0.3])
    prompt = torch.tensor([0, 0, 0, 1, 1, 1])
    pos = torch.tensor([0, 1, 2, 2, 0, 1])
    # trusted, keep 2, rho 0.5 -> k+ = 1: group 0 keeps 0.9 (row 1) and 0.2 (row 0);
    # group 1 keeps 0.7 (row 3) and 0.1 (row 4)
    assert select_rows(scores, prompt, pos, 2, 0.5, trusted=True) == [True, True, False, True, True, False]
    # fallback: the first two group positions of each group: rows 0, 1 and (positions 0, 1) rows 4, 5
    assert select_rows(scores, prompt, pos, 2, 0.5, trusted=False) == [True, True, False, False, True, True]


def test_auroc_hand_computed():
    # positives {0.9, 0.3}, negatives {0.8, 0.1}: 0.9>0.8, 0.9>0.1, 0.3<0.8, 0.3>0.1 -> 3/4
    assert auroc(torch.tensor([0.9, 0.8, 0.3, 0.1]), torch.tensor([1, 0, 1, 0])) == 0.75
    # a tie counts one half: positives {0.5, 0.7}, negatives {0.5}: (0.5 + 1) / 2
    assert auroc(torch.tensor([0.5, 0.7, 0.5]), torch.tensor([1, 1, 0])) == 0.75
    assert auroc(torch.tensor([0.1, 0.9]), torch.tensor([1, 0])) == 0.0
    assert math.isnan(auroc(torch.tensor([0.1, 0.9]), torch.tensor([1, 1])))


def test_all_equal_share_ignores_absent_rows():
    nan = float("nan")
    # [1, 1]: equal; [0, 1]: not; [nan, 0]: one present row, equal; [nan, nan]: nothing, equal
    assert all_equal_share(torch.tensor([[1.0, 1.0], [0.0, 1.0], [nan, 0.0], [nan, nan]])) == 0.75
    assert all_equal_share(torch.zeros(0, 4)) == 0.0


def test_within_group_auroc_ignores_groups_of_one_outcome():
    scores = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, 0.3], [0.9, 0.9, 0.1]])
    labels = torch.tensor([[1, 0, 0], [1, 0, 1], [1, 1, 1]])
    # group 0: the positive 0.9 beats 0.1 and 0.5 -> 1.0; group 1: positives {0.2, 0.3} against 0.8 -> 0.0;
    # group 2: one class, left out. Mean 0.5, although pooled they rank better than chance: 11.5 of 18 pairs
    assert within_group_auroc(scores, labels) == 0.5
    assert auroc(scores.flatten(), labels.flatten()) == pytest.approx(23 / 36)
    assert math.isnan(within_group_auroc(scores[2:], labels[2:]))
