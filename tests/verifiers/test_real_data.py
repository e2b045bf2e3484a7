"""Verifiers against real references from ../shared/data (MATH-V, raccoon boxes)."""

import json

import pytest

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_mathv_free_form_answers_verify_against_themselves_and_not_others(shared_data):
    rows = [r for r in _rows(shared_data / "geometry_mathv" / "annotations.jsonl") if not r["options"]]
    assert len(rows) >= 20
    math_v = resolve_verifier("math")
    for r in rows:
        ref = r["answer"]  # one holds "\x0crac{36}{13}": "\frac" mangled by JSON escaping at the source
        written = ref.replace("\x0c", "\\f")  # what a model would write
        same = safe_verify(math_v, f"<answer>{written}</answer>", Sample(r["id"], (), ref, "math"))
        assert same.score == 1.0, (ref, same.reason)
        wrong = safe_verify(math_v, "<answer>123457</answer>", Sample(r["id"], (), ref, "math"))
        assert wrong.score == 0.0, ref


def test_mathv_choices_by_letter_and_by_option_text(shared_data):
    rows = [r for r in _rows(shared_data / "geometry_mathv" / "annotations.jsonl") if r["options"]]
    rows += [r for r in _rows(shared_data / "chart_mathv_statistics" / "annotations.jsonl") if r["options"]]
    choice = resolve_verifier("choice")
    for r in rows:
        s = Sample(r["id"], (), r["answer"], "choice", meta={"options": r["options"]})
        assert safe_verify(choice, f"The answer is ({r['answer']}).", s).score == 1.0
        idx = "ABCDE".index(r["answer"])
        text = r["options"][idx]
        if sum(o.strip() == text.strip() for o in r["options"]) == 1:
            assert safe_verify(choice, f"<answer>{text}</answer>", s).score == 1.0, (text, r["options"])
        other = "ABCDE"[(idx + 1) % len(r["options"])]
        assert safe_verify(choice, f"<answer>{other}</answer>", s).score == 0.0


def test_raccoon_boxes_in_all_formats(shared_data):
    iou = resolve_verifier("iou")
    for row in _rows(shared_data / "grounding_raccoon" / "annotations.jsonl"):
        obj = row["objects"][0]
        w, h = int(obj["width"]), int(obj["height"])
        ref = [float(obj[k]) for k in ("xmin", "ymin", "xmax", "ymax")]
        exact = Sample(row["filename"], (), ref, "iou", meta={"image_size": [w, h]})
        assert safe_verify(iou, json.dumps({"bbox_2d": ref}), exact).score == pytest.approx(1.0)
        n1000 = [round(ref[0] / w * 1000), round(ref[1] / h * 1000), round(ref[2] / w * 1000), round(ref[3] / h * 1000)]
        s1000 = Sample(row["filename"], (), ref, "iou", meta={"image_size": [w, h], "box_format": "norm1000"})
        text = f"<|box_start|>({n1000[0]},{n1000[1]}),({n1000[2]},{n1000[3]})<|box_end|>"
        assert safe_verify(iou, text, s1000).score > 0.98
        whole = safe_verify(iou, f"[0, 0, {w}, {h}]", exact).score
        assert whole < 1.0 and whole == pytest.approx((ref[2] - ref[0]) * (ref[3] - ref[1]) / (w * h))
