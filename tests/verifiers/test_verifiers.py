"""Table-driven verifier cases, adversarial rows included; the expected score and why."""

import pytest

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify

BIG = "9" * 5000
GARBAGE = ("\x00\ufffd<answer>" * 3 + "}{\\boxed{" * 7 + "lorem ") * 20_000  # ~1 MB

CASES = [
    # verifier, completion, reference, meta, expected score
    ("count", "<answer>3</answer>", 3, {}, 1.0),
    ("count", " <think>two red, one more</think> <answer>3</answer>\n", 3, {}, 1.0),
    ("count", "<answer>3</answer> and some junk", 3, {}, 0.0),  # text after the answer
    ("count", "<answer>3</answer><answer>4</answer>", 3, {}, 0.0),  # hedged
    ("count", f"<answer>{BIG}</answer>", 3, {}, 0.0),
    ("math", "<answer>\\frac{1}{2}</answer>", "0.5", {}, 1.0),
    ("math", "so the answer is 1/2", "\\frac{1}{2}", {}, 1.0),
    ("math", "\\boxed{x = 7}", "7", {}, 1.0),
    ("math", "<answer>45^\\circ</answer>", "45", {}, 1.0),
    ("math", "<answer>3 cm</answer>", "3", {}, 1.0),
    ("math", "<answer>2\\sqrt{3}</answer>", "\\sqrt{12}", {}, 1.0),
    ("math", "\\boxed{3} or \\boxed{4}", "3", {}, 0.0),  # hedged
    ("math", "<answer>8</answer>", "7", {}, 0.0),
    ("math", "<answer>" + "\\frac{" * 300 + "1" + "}" * 300 + "</answer>", "1", {}, 0.0),  # deeply nested
    ("math", f"<answer>{BIG}</answer>", "7", {}, 0.0),
    ("choice", "The answer is (B).", "B", {}, 1.0),
    ("choice", "<answer>B.</answer>", "B", {}, 1.0),
    ("choice", "<answer>B) 53 degrees</answer>", "B", {}, 1.0),
    ("choice", "<answer>$53^{\\circ}$</answer>", "B", {"options": ["$52^{\\circ}$", "$53^{\\circ}$"]}, 1.0),
    ("choice", "<answer>A or B</answer>", "B", {}, 0.0),
    ("choice", "<answer>A, B, C, D, E</answer>", "B", {}, 0.0),
    ("choice", "<answer>C</answer>", "B", {}, 0.0),
    ("number", "<answer>1,250</answer>", 1200, {}, 1.0),  # within 5 %
    ("number", "<answer>12.5%</answer>", 12.5, {}, 1.0),
    ("number", "<answer>13 kg</answer>", 12.5, {"rel_tol": 0.01}, 0.0),
    ("number", "<answer>1e999</answer>", 5, {}, 0.0),  # inf
    ("number", "<answer>3 or 4</answer>", 3, {}, 0.0),  # two numbers
    ("iou", "<answer>[10, 10, 50, 50]</answer>", [10, 10, 50, 50], {"image_size": [100, 100]}, 1.0),
    ("iou", '{"bbox_2d": [10, 10, 50, 50], "label": "raccoon"}', [10, 10, 50, 50], {"image_size": [100, 100]}, 1.0),
    ("iou", "<|box_start|>(100,100),(500,500)<|box_end|>", [10, 10, 50, 50], {"image_size": [100, 100], "box_format": "norm1000"}, 1.0),
    ("iou", "(0.1, 0.1), (0.5, 0.5)", [10, 10, 50, 50], {"image_size": [100, 100], "box_format": "norm1"}, 1.0),
    ("iou", "[5, 5, 25, 25]", [10, 10, 50, 50], {"image_size": [100, 100], "input_size": [50, 50]}, 1.0),
    ("iou", "[10, 10, 30, 50]", [10, 10, 50, 50], {"image_size": [100, 100]}, 0.5),
    ("iou", "[10, 10, 30, 50]", [10, 10, 50, 50], {"image_size": [100, 100], "threshold": 0.5}, 1.0),
    ("iou", "[0, 0, 100, 100]", [10, 10, 50, 50], {"image_size": [100, 100]}, 0.16),  # whole image
    ("iou", "[10, 10, 50, 50] [60, 60, 90, 90]", [10, 10, 50, 50], {"image_size": [100, 100]}, 0.0),  # two boxes
    ("iou", "[50, 50, 10, 10]", [10, 10, 50, 50], {"image_size": [100, 100]}, 0.0),  # degenerate
    ("iou", "[nan, 1, 2, 3]", [10, 10, 50, 50], {"image_size": [100, 100]}, 0.0),
    ("iou", "[0, 0, 1e12, 1e12]", [10, 10, 50, 50], {"image_size": [100, 100]}, 0.0),  # absurd
    ("boxes", "[[10,10,50,50],[60,60,90,90]]", [[60, 60, 90, 90], [10, 10, 50, 50]], {"image_size": [100, 100]}, 1.0),
    ("boxes", "[[10,10,50,50],[10,10,50,50],[60,60,90,90]]", [[10, 10, 50, 50], [60, 60, 90, 90]], {"image_size": [100, 100]}, 0.8),
    ("boxes", "[[10,10,50,50]]", [[10, 10, 50, 50], [60, 60, 90, 90]], {"image_size": [100, 100]}, 2 / 3),
    ("boxes", "[" + ",".join(["[0,0,100,100]"] * 500) + "]", [[10, 10, 50, 50]], {"image_size": [100, 100]}, 0.0),
    ("order", "C, A, B", ["C", "A", "B"], {}, 1.0),
    ("order", "<answer>[C, A, B]</answer>", ["C", "A", "B"], {"metric": "exact"}, 1.0),
    ("order", "C -> A -> B", ["C", "A", "B"], {}, 1.0),
    ("order", "B, A, C", ["C", "A", "B"], {}, 0.0),  # reversed
    ("order", "C, B, A", ["C", "A", "B"], {}, 2 / 3),  # tau 1/3 -> (1/3 + 1) / 2
    ("order", "C, A, A", ["C", "A", "B"], {}, 0.0),  # repeated
    ("order", "C, A", ["C", "A", "B"], {}, 0.0),  # missing
    ("order", "C, A, B, D", ["C", "A", "B"], {}, 0.0),  # unknown
    ("tiou", "[2.5, 7.0]", [2.5, 7.0], {}, 1.0),
    ("tiou", "from 2.5 to 7.0 seconds", [2.5, 7.0], {}, 1.0),
    ("tiou", "<answer>5 - 7</answer>", [2.5, 7.0], {}, 2 / 4.5),
    ("tiou", "[7.0, 2.5]", [2.5, 7.0], {}, 0.0),
    ("format", "<think>a</think>\n<answer>3</answer>", None, {}, 1.0),
    ("format", "<think>a</think><answer>3</answer> extra", None, {}, 0.0),
    ("format", "<answer>3</answer>", None, {}, 0.0),
    ("format", "<think>a</think><think>b</think><answer>3</answer>", None, {}, 0.0),
]


@pytest.mark.parametrize("name,completion,reference,meta,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_table(name, completion, reference, meta, expected):
    v = safe_verify(resolve_verifier(name), completion, Sample("t", (), reference, name, meta=meta))
    assert v.score == pytest.approx(expected, abs=1e-6), v.reason
    assert v.reason


@pytest.mark.parametrize("name", ["count", "math", "choice", "number", "iou", "boxes", "order", "tiou", "format"])
def test_one_megabyte_of_garbage_scores_zero(name):
    ref = {"count": 3, "math": "3", "choice": "B", "number": 3, "iou": [0, 0, 5, 5], "boxes": [[0, 0, 5, 5]],
           "order": ["A", "B"], "tiou": [1, 2], "format": None}[name]
    v = safe_verify(resolve_verifier(name), GARBAGE, Sample("g", (), ref, name, meta={"image_size": [10, 10]}))
    assert v.score == 0.0


def test_unknown_verifier_lists_known():
    with pytest.raises(KeyError, match="known: boxes, choice, count"):
        resolve_verifier("nope")
