"""PRCO's reward math by hand: the Observer's utility (its Solver answers' mean) and the leak gate."""

import math

import pytest
import torch

from mmrlvr.methods.prco.maths import leaked, string_leak, utility_rewards

NAN = float("nan")


def test_utility_is_the_mean_of_scorable_answers_and_a_leak_gets_the_leak_reward():
    # caption 0: answers 1, 0, 1 -> 2/3; caption 1: 0, NaN, 1 -> 1/2 (NaN left out);
    # caption 2: all NaN -> NaN; caption 3: 1, 1, 1 but it leaked -> the leak reward
    solver = torch.tensor([[1.0, 0.0, 1.0], [0.0, NAN, 1.0], [NAN, NAN, NAN], [1.0, 1.0, 1.0]])
    leak = torch.tensor([False, False, False, True])
    got = utility_rewards(solver, leak)
    assert got[:2].tolist() == pytest.approx([2 / 3, 0.5]) and math.isnan(got[2]) and got[3] == 0.0
    assert utility_rewards(solver, leak, leak_reward=-0.2)[3].item() == pytest.approx(-0.2)
    # a partial-credit verifier: the mean of 0.25 and 0.5
    assert utility_rewards(torch.tensor([[0.25, 0.5]]), torch.tensor([False])).item() == pytest.approx(0.375)


@pytest.mark.parametrize("text, gold, leaks", [
    ("- 3 red circles", "3", False),            # a short gold as a bare count: HiLL flags only phrases
    ("the number of red shapes is 3", "3", True),
    ("Total = 3", "3", True),
    ("THE ANSWER IS 3", "3", True),              # phrases are case-insensitive
    ("so \\boxed{3}", "3", True),
    ("bar 2019: 12.5 percent", "12.5", True),   # a longer gold: any substring
    ("Label: Paris", "paris", True),             # then case-insensitively
    ("bar 2019: 12.6", "12.5", False),
    ("is 3", "", False),                         # no gold, no leak
])
def test_string_gate_is_hills(text, gold, leaks):
    assert string_leak(text, gold) is leaks


def test_leak_gates():
    captions = ["<answer>3</answer>", "- red circle, red square; count is 2", "- red circle"]
    golds = [3, 2, 1]
    scores = torch.tensor([1.0, 0.0, NAN])  # the verifier's score of each caption read as an answer
    assert leaked(captions, golds, scores, "verifier").tolist() == [True, False, False]
    assert leaked(captions, golds, scores, "verifier+string").tolist() == [True, True, False]
    assert leaked(captions, golds, scores, "none").tolist() == [False, False, False]
    assert leaked(["x"], [1], torch.tensor([0.5]), "verifier").tolist() == [False]  # accepted means > 0.5
    with pytest.raises(ValueError, match="unknown leak gate 'strict'"):
        leaked(captions, golds, scores, "strict")
