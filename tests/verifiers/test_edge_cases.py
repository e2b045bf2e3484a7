"""Verifier cases a plausible bug would get wrong while every other test still passes: GIoU by
hand, a boxed answer inside <answer>, order labels in another case, degenerate predicted boxes,
an option letter beyond the options."""

import pytest

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify
from mmrlvr.verifiers.answer import parse_choice
from mmrlvr.verifiers.extract import extract_answer
from mmrlvr.verifiers.geometry import giou


def score(name, completion, reference, meta=None):
    return safe_verify(resolve_verifier(name), completion, Sample("t", (), reference, name, meta=meta or {}))


def test_giou_by_hand():
    # disjoint: a = (0,0,2,2), b = (3,0,5,2): IoU 0, union 8, enclosing box 5 x 2 = 10
    # GIoU = 0 - (10 - 8) / 10 = -0.2
    assert giou([0, 0, 2, 2], [3, 0, 5, 2]) == pytest.approx(-0.2)
    # overlapping: a = (0,0,4,4), b = (2,2,6,6): inter 4, union 28, IoU 1/7; enclosing 6 x 6 = 36
    # GIoU = 1/7 - (36 - 28) / 36 = 0.142857 - 0.222222 = -0.079365
    assert giou([0, 0, 4, 4], [2, 2, 6, 6]) == pytest.approx(1 / 7 - 8 / 36)
    # the iou verifier with metric giou scores (GIoU + 1) / 2 = 0.4 for the disjoint pair
    v = score("iou", "<answer>[3, 0, 5, 2]</answer>", [0, 0, 2, 2], {"metric": "giou"})
    assert v.score == pytest.approx(0.4) and v.parts["iou"] == 0.0


def test_boxed_inside_answer_is_the_answer():
    assert extract_answer("<answer>The count is \\boxed{42}.</answer>") == "42"
    assert score("count", "<think>...</think><answer>so \\boxed{3}</answer>", 3).score == 1.0
    assert score("math", "<answer>x = \\boxed{\\frac{1}{2}}</answer>", "0.5").score == 1.0


def test_order_labels_in_another_case():
    # references A..D, answer in lower case: the same labels, exact order -> tau 1 -> 1.0
    assert score("order", "<answer>a, b, c, d</answer>", ["A", "B", "C", "D"]).score == 1.0
    # one swap of adjacent labels: tau = 1 - 2 * 1 / 6 = 2/3 -> (2/3 + 1) / 2 = 5/6
    assert score("order", "<answer>b, a, c, d</answer>", ["A", "B", "C", "D"]).score == pytest.approx(5 / 6)
    assert score("order", "<answer>B, a, C, D</answer>", ["A", "B", "C", "D"], {"metric": "exact"}).score == 0.0


def test_degenerate_predicted_boxes_count_against_precision():
    ref = [[0, 0, 10, 10], [20, 20, 30, 30]]
    # one perfect box, one with no area: tp 1, predicted 2, references 2 -> P = R = 1/2, F1 = 1/2
    v = score("boxes", "<answer>[0, 0, 10, 10], [5, 5, 5, 9]</answer>", ref)
    assert v.parts["precision"] == pytest.approx(0.5) and v.parts["recall"] == pytest.approx(0.5)
    assert v.score == pytest.approx(0.5)
    # without the degenerate box: P = 1, R = 1/2, F1 = 2/3
    assert score("boxes", "<answer>[0, 0, 10, 10]</answer>", ref).score == pytest.approx(2 / 3)


def test_option_letter_beyond_the_options_is_not_a_choice():
    options = ["red", "green", "blue", "black"]  # letters A-D
    assert parse_choice("E", options) == set()
    assert parse_choice("E") == {"E"}  # without options every letter up to J is valid
    assert parse_choice("(A) or (E)", options) == {"A"}  # E is not an option: one choice left
    assert score("choice", "<answer>E</answer>", "E", {"options": options}).score == 0.0
    assert score("choice", "<answer>(B) or (F)</answer>", "B", {"options": options}).score == 1.0
