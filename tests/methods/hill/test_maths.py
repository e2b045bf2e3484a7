"""HiLL's hint reward, gates and choice against hand-computed values (HU = hinter_utils.py at 195d94e)."""

import math

import pytest
import torch

from mmrlvr.methods.hill.maths import (GATE_FAILURE_PENALTY, best_hint, hint_reward, leaks_answer, mean_reliance,
                                       parse_hint, prob_term, sequence_mean_logprob)


def test_transfer_weighted_non_deg_by_hand():
    # 1 of 4 correct: p = 0.25; non_deg = 1 - 0.25^4 - 0.75^4 = 1 - 0.00390625 - 0.31640625 = 0.6796875
    # reliance -0.15 at T = 0.5: w = exp(-0.3) = 0.7408182; R = 0.6796875 * 0.7408182 = 0.5035250
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    reward, base = hint_reward(r, True, "transfer_weighted_non_deg", reliance=-0.15, temperature=0.5)
    assert base == pytest.approx(0.6796875)
    assert reward == pytest.approx(0.6796875 * math.exp(-0.3))
    assert reward == pytest.approx(0.5035250, abs=1e-6)


def test_positive_reliance_is_clamped_and_none_weighs_one():
    r = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0])  # p = 0.4, N = 5: 1 - 0.4^5 - 0.6^5 = 1 - 0.01024 - 0.07776 = 0.912
    assert hint_reward(r, True, reliance=0.7, temperature=0.3)[0] == pytest.approx(0.912)
    assert hint_reward(r, True, reliance=None, temperature=0.3)[0] == pytest.approx(0.912)


def test_variance_types_by_hand():
    r = torch.tensor([0.9, 0.2, 0.0, 0.0])  # p = 0.25; p(1-p) = 0.1875
    assert hint_reward(r, True, "variance")[0] == pytest.approx(0.1875)
    # transfer weighted, reliance -0.3 at T 0.3: 0.1875 * e^-1 = 0.0689770
    assert hint_reward(r, True, "transfer_weighted_variance", reliance=-0.3, temperature=0.3)[0] == pytest.approx(0.068977, abs=1e-6)
    # non_deg ignores the reliance
    assert hint_reward(r, True, "non_deg", reliance=-5.0)[0] == pytest.approx(0.6796875)


def test_correct_means_strictly_above_one_half():
    # 0.5 is not correct (HT:72 `> 0.5`): p = 1/4, not 2/4
    assert prob_term(torch.tensor([0.5, 0.6, 0.0, 0.0]), "non_deg") == pytest.approx(0.6796875)


def test_flat_groups_and_gate_failures():
    assert hint_reward(torch.ones(4), True) == (0.0, 0.0)
    assert hint_reward(torch.zeros(4), True, reliance=-1.0) == (0.0, 0.0)
    assert hint_reward(torch.tensor([1.0, 0.0]), False) == (GATE_FAILURE_PENALTY, 0.0)
    assert hint_reward(None, True) == (GATE_FAILURE_PENALTY, 0.0)
    assert GATE_FAILURE_PENALTY == -0.2


def test_a_term_not_above_the_original_groups_is_cut_to_zero():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])  # base 0.6796875
    assert hint_reward(r, True, "non_deg", original_prob=0.7) == (0.0, pytest.approx(0.6796875))
    assert hint_reward(r, True, "non_deg", original_prob=0.6)[0] == pytest.approx(0.6796875)


def test_mean_reliance_reads_the_correct_rollouts_only():
    rel = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    assert mean_reliance(rel, torch.tensor([1.0, 0.0, 0.7, 0.5])) == pytest.approx(-2.0)  # rows 0 and 2
    assert mean_reliance(rel, torch.tensor([0.0, 0.5, 0.0, 0.0])) is None


def test_sequence_mean_logprob_over_mixed_lengths():
    lp = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert sequence_mean_logprob(lp, mask).tolist() == [-2.0, -2.0]


def test_best_hint_first_argmax_and_only_when_it_beats_the_original():
    assert best_hint([0.3, 0.5, 0.5, -0.2], [0.4, 0.6, 0.7, 0.0]) == 1  # a tie: the first wins
    assert best_hint([0.0, -0.2, 0.0], [0.0, 0.0, 0.0]) is None  # no mixed hinted group: keep the original
    # the best by reward decides, even when another hint has the larger prob_term
    assert best_hint([0.2, 0.1], [0.5, 0.9], original_prob=0.6) is None
    assert best_hint([], []) is None


@pytest.mark.parametrize("hint, gold, leak", [
    ("So the answer is 7.", "7", True),
    ("Consider 7 groups of shapes.", "7", False),  # short gold: only revealing phrases count
    ("x=12 here", "12", False),  # "= 12" needs the space, as theirs
    ("it EQUALS 12", "12", True),  # case-insensitive for short golds
    ("write \\boxed{7}", "7", True),
    ("the ratio 3/4 appears", "3/4", True),
    ("think of paris", "Paris", True),
    ("think of France", "Paris", False),
    ("anything", "", False),
    ("anything", "   ", False),
    # short golds as whole words, an option letter with its case (HU flagged these substrings)
    ("The triangle is a right triangle.", "A", False),
    ("The answer is A.", "A", True),
    ("so the answer: B", "B", True),
    ("Angle C is obtuse and this D is a label", "D", False),  # "this D" is not "is D"
    ("the side is 30 cm", "3", False),
    ("x = 3.5", "3", False),
    ("x = 3, y = 4", "3", True),
])
def test_leak_gate(hint, gold, leak):
    assert leaks_answer(hint, gold) is leak


def test_parse_hint():
    assert parse_hint("<analysis>a</analysis>\n<HINT>  count twice \n</hint>") == "count twice"
    assert parse_hint("<hint>   </hint>") is None
    assert parse_hint("no tags at all") is None
    assert parse_hint("<hint>first</hint> <hint>second</hint>") == "first"
