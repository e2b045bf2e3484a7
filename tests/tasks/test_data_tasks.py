"""geometry, chart, grounding: synthetic versions (determinism, held-out, teacher flaws, labels)
and the grounding coordinate conventions through the real processor."""

import json

import numpy as np
import pytest

from mmrlvr.config import load_config
from mmrlvr.data.collate import encode_prompts
from mmrlvr.data.media import load_image
from mmrlvr.tasks import load_task
from mmrlvr.tasks.chart import COLORS as CHART_COLORS
from mmrlvr.tasks.grounding import COLORS, box_format_for
from mmrlvr.train.setup import task_args
from mmrlvr.verifiers.base import resolve_verifier, safe_verify


@pytest.mark.parametrize("task", ["geometry", "chart", "grounding"])
def test_synthetic_is_deterministic_lazy_and_held_out(task):
    a = load_task(task, "train", 300, 1, eval_size=64)
    b = load_task(task, "train", 300, 1, eval_size=64)
    held = load_task(task, "eval", 64, 1, eval_size=64)
    assert [s.images for s in a] == [s.images for s in b] and [s.target for s in a] == [s.target for s in b]
    assert all(isinstance(s.images[0], bytes) for s in a)  # PNG bytes, decoded per batch
    assert not {s.images[0] for s in a} & {s.images[0] for s in held}  # no held-out image in training
    assert load_task(task, "train", 300, 2, eval_size=64)[0].images != a[0].images


def _flaw_rate(samples, wrong):
    hit = [s for s in samples if wrong(s) is not None]
    return sum(wrong(s) for s in hit) / len(hit), len(hit)


def test_geometry_teacher_counts_a_side_of_three_as_two():
    samples = load_task("geometry", "train", 2000, 0)
    for s in samples:
        w, h = s.meta["sides"]
        assert s.meta["area"] == w * h and s.meta["teacher"] in (w * h, (2 if w == 3 else w) * (2 if h == 3 else h))
        if s.verifier == "choice":
            assert s.reference == "ABCD"[(2, 3, 4, 6).index(w * h)]
            assert s.target == f"<answer>{'ABCD'[(2, 3, 4, 6).index(s.meta['teacher'])]}</answer>"
        else:
            assert s.reference == str(w * h) and s.target == f"<answer>{s.meta['teacher']}</answer>"
    rate, n = _flaw_rate(samples, lambda s: (s.meta["teacher"] != s.meta["area"]) if 3 in s.meta["sides"] else None)
    assert n > 900 and 0.63 < rate < 0.77  # flaw_prob 0.7 over ~1140 rectangles with a side of 3
    assert all(s.meta["teacher"] == s.meta["area"] for s in samples if 3 not in s.meta["sides"])
    # the shaded rectangle really is w x h unit squares: look at the centre of each 28 px square
    for s in samples[:40]:
        img = np.asarray(load_image(s.images[0])).astype(int)
        centres = img[14::28, 14::28]
        rows, cols = np.nonzero(np.abs(centres - 245).max(axis=2) > 60)
        w, h = s.meta["sides"]
        assert len(rows) == w * h and (cols.max() - cols.min() + 1, rows.max() - rows.min() + 1) == (w, h)


def test_chart_answers_follow_the_drawn_values():
    samples = load_task("chart", "train", 1000, 0)
    for s in samples[:60]:
        v = s.meta["values"]
        expect = {"max": max(v), "diff": max(v) - min(v)}.get(s.meta["question"])
        if expect is not None:
            assert s.reference == str(expect) and s.verifier == "number"
        img = np.asarray(load_image(s.images[0])).astype(int)
        if s.meta["kind"] == "bar":  # bar i spans x 28i+4 .. 28i+23; its top is at y = 140 - 28 v
            for i, value in enumerate(v):
                col = img[:, 28 * i + 14]
                colored = np.nonzero(np.abs(col - col[:, :1]).max(axis=1) > 60)[0]
                assert 140 - colored.min() == 28 * value
        if s.meta["question"] == "tallest":
            assert s.verifier == "exact" and s.reference in CHART_COLORS and v.count(max(v)) == 1
    rate, n = _flaw_rate(samples, lambda s: (s.meta["teacher"] != s.reference) if s.meta["question"] == "max" and max(s.meta["values"]) == 4 else None)
    assert n > 60 and 0.6 < rate < 0.8  # a largest value of 4 is read as 5 ~70% of the time
    assert all(s.meta["teacher"] == s.reference for s in samples if 4 not in s.meta["values"])


def test_grounding_reference_box_encloses_the_named_shape():
    samples = load_task("grounding", "train", 200, 0)
    loose = 0
    for s in samples[:50]:
        text = s.messages[0]["content"][-1]["text"]
        color = next(c for c in COLORS if f"the {c} " in text)
        img = np.asarray(load_image(s.images[0])).astype(int)
        ys, xs = np.nonzero((np.abs(img - np.array(COLORS[color])).max(axis=2) < 10))
        x1, y1, x2, y2 = s.reference
        assert x1 <= xs.min() and xs.max() <= x2 and y1 <= ys.min() and ys.max() <= y2
        assert xs.min() - x1 <= 1 and y2 - ys.max() <= 1  # tight: the shape touches its box
        said = json.loads(s.target[len("<answer>"):-len("</answer>")])
        loose += said != [round(v) for v in s.reference]
    assert 25 <= loose <= 45  # ~70% of 50 teacher boxes are padded


def test_grounding_boxes_follow_the_cell_and_the_background_encodes_position():
    samples = load_task("grounding", "train", 64, 0, n_shapes=1)
    for s in samples:
        x1, y1, x2, y2 = s.reference
        assert (x2 - x1, y2 - y1) == (16, 16) and x1 % 28 == 6 and y1 % 28 == 6  # centred in its cell
        img = np.asarray(load_image(s.images[0])).astype(int)
        assert img[int(y1) + 8, int(x1) + 8].tolist() != img[0, 0].tolist()  # the shape is drawn there
    corner = np.asarray(load_image(samples[0].images[0])).astype(int)
    # red falls left to right, blue top to bottom: a token's own pixels say where it is
    assert corner[2, 2, 0] - corner[2, 109, 0] > 140 and corner[2, 2, 2] - corner[109, 2, 2] > 140
    plain = np.asarray(load_image(load_task("grounding", "train", 1, 0, ramp=False)[0].images[0])).astype(int)
    assert plain[2, 2].tolist() == plain[109, 109].tolist() == [235, 235, 235]
    with pytest.raises(ValueError, match="n_shapes 5 must be 1-4"):
        load_task("grounding", "train", 4, 0, n_shapes=5)


@pytest.mark.parametrize("model_type, expect", [
    ("qwen2_5_vl", "absolute"), ("qwen2_vl", "norm1000"), ("qwen3_vl", "norm1000"), (None, "absolute"),
])
def test_coordinate_convention_by_model_family(model_type, expect):
    assert box_format_for("auto", model_type) == expect
    assert box_format_for("norm1000", "qwen2_5_vl") == "norm1000"  # config override wins
    s = load_task("grounding", "eval", 1, 0, model_type=model_type)[0]
    assert s.meta["box_format"] == expect
    if expect == "norm1000":  # the teacher answers in the model's units: 112 px -> 1000
        said = json.loads(s.target[8:-9])
        assert max(said) <= 1000 and said[0] == round(s.reference[0] * 1000 / 112) or s.meta["teacher_loose"]


def test_task_args_passes_model_type_only_to_tasks_that_take_it():
    cfg = load_config(None, ["task.name=grounding", "model.path=tiny"])
    assert task_args(cfg)["model_type"] == "qwen2_5_vl"
    cfg = load_config(None, ["task.name=geometry"])
    assert "model_type" not in task_args(cfg)


def test_raccoon_input_size_is_filled_at_encode_and_iou_maps_back(shared_data, tiny):
    _, processor = tiny
    d = shared_data / "grounding_raccoon"
    s = load_task("grounding", "eval", 50, 0, data=str(d / "annotations.jsonl"), image_root=str(d / "images"),
                  holdout_frac=0.0, eval_data=str(d / "annotations.jsonl"))[0]
    assert s.meta["input_size"] is None
    encode_prompts(processor, [s])
    # raccoon-1.jpg is 650x417; the tiny processor (max 224*224 px, factor 28) resizes it to 252x168
    assert s.meta["image_size"] == [650, 417] and s.meta["input_size"] == [252, 168]
    x1, y1, x2, y2 = s.reference  # the reference in the resized image's pixels scores IoU 1
    box = [round(x1 * 252 / 650, 2), round(y1 * 168 / 417, 2), round(x2 * 252 / 650, 2), round(y2 * 168 / 417, 2)]
    v = safe_verify(resolve_verifier("iou"), f"<answer>{box}</answer>", s)
    assert v.score == pytest.approx(1.0, abs=1e-3)
    # the same numbers read as original pixels (no mapping) would score far less
    wrong = safe_verify(resolve_verifier("iou"), f"<answer>{s.reference}</answer>", s)
    assert wrong.score < 0.5
