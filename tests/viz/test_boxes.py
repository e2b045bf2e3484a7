import numpy as np
import pytest
from PIL import Image

from mmrlvr.types import Sample
from mmrlvr.verifiers.grounding import iou_verifier
from mmrlvr.viz.boxes import PRED_COLOR, REF_COLOR, draw_boxes, draw_prediction, plot_grounding, read_box
from mmrlvr.viz.figure import save_figure

WHITE = (255, 255, 255)


def _px(img, x, y):
    return tuple(int(v) for v in np.asarray(img)[y, x])


def test_boxes_drawn_where_they_belong():
    img = Image.new("RGB", (200, 100), WHITE)
    out = draw_boxes(img, pred=[100, 20, 180, 90], ref=[20, 10, 80, 60])
    assert out.size == (200, 100) and _px(img, 20, 30) == WHITE  # the input is not modified
    assert _px(out, 20, 30) == REF_COLOR  # left edge of the reference
    assert _px(out, 79, 30) == REF_COLOR  # right edge, drawn inside the box
    assert _px(out, 50, 10) == REF_COLOR  # top edge
    assert _px(out, 50, 35) == WHITE  # inside
    assert _px(out, 82, 30) == WHITE  # just outside
    assert _px(out, 100, 50) == PRED_COLOR and _px(out, 179, 50) == PRED_COLOR
    assert _px(out, 140, 89) == PRED_COLOR and _px(out, 140, 55) == WHITE


def test_prediction_in_norm1000_is_mapped_to_image_pixels_and_scored_like_the_verifier():
    img = Image.new("RGB", (200, 100), WHITE)
    meta = {"box_format": "norm1000", "image_size": (200, 100)}
    ref = [80, 20, 160, 80]
    completion = "<answer>[500, 200, 900, 900]</answer>"
    # [500, 200, 900, 900] / 1000 * (200, 100) = [100, 20, 180, 90]
    # IoU with [80, 20, 160, 80]: inter 60 x 60 = 3600, union 4800 + 5600 - 3600 = 6800 -> 0.52941
    out, reading = draw_prediction(img, completion, ref, meta)
    assert reading.pred == pytest.approx([100, 20, 180, 90])
    assert reading.iou == pytest.approx(3600 / 6800)
    verdict = iou_verifier(completion, Sample(id="s", messages=(), reference=ref, verifier="iou", meta=meta))
    assert reading.iou == pytest.approx(verdict.score) and reading.note == verdict.reason
    assert _px(out, 100, 50) == PRED_COLOR and _px(out, 80, 50) == REF_COLOR


def test_prediction_in_model_input_pixels_uses_input_size():
    meta = {"image_size": (200, 100), "input_size": (100, 50)}  # the model saw the image at half size
    reading = read_box("[50, 10, 90, 45]", [100, 20, 180, 90], meta)
    assert reading.pred == pytest.approx([100, 20, 180, 90]) and reading.iou == pytest.approx(1.0)


@pytest.mark.parametrize("completion, note", [
    ("I cannot see it", "no box found"),
    ("[1, 2, 30, 40] and [5, 6, 70, 80]", "2 boxes for a single-box answer"),
    ("[50, 50, 10, 10]", "degenerate box (x2 <= x1 or y2 <= y1)"),
])
def test_no_usable_box_draws_only_the_reference(completion, note):
    img = Image.new("RGB", (100, 100), WHITE)
    out, reading = draw_prediction(img, completion, [10, 10, 60, 60])
    assert reading.pred is None and reading.iou is None and reading.note == note
    arr = np.asarray(out)
    assert not (arr == PRED_COLOR).all(axis=-1).any()
    assert _px(out, 10, 30) == REF_COLOR


def test_grounding_figure_saves_a_png_of_the_real_photo(tmp_path, shared_data):
    img = Image.open(shared_data / "grounding_raccoon" / "images" / "raccoon-1.jpg")
    ref = [81, 88, 522, 408]  # raccoon-1.jpg's box in annotations.jsonl
    fig = plot_grounding([(img, "[100, 90, 500, 400]", ref, {}), (img, "nothing", ref, {})])
    path = save_figure(fig, tmp_path / "sub" / "boxes.png")
    with Image.open(path) as png:
        assert png.format == "PNG" and png.size[0] > 400
        arr = np.asarray(png.convert("RGB"))
    # both colours made it into the rendered figure
    assert (np.abs(arr.astype(int) - REF_COLOR).sum(-1) < 60).sum() > 100
    assert (np.abs(arr.astype(int) - PRED_COLOR).sum(-1) < 60).sum() > 100


def test_model_input_size_is_what_the_processor_feeds_the_model(tiny):
    from mmrlvr.viz.boxes import model_input_size

    _, processor = tiny
    # 200x100 -> round to multiples of 28: 196 x 112 (8 x 14 patches of 14), within the tiny
    # processor's 3136..50176 pixels
    assert model_input_size(processor, Image.new("RGB", (200, 100))) == (196, 112)
    # 650x417 (raccoon-1.jpg) is 271050 px, over the 50176 cap: beta = sqrt(271050 / 50176) = 2.3242;
    # height: floor(417 / 2.3242 / 28) = floor(6.41) = 6 -> 168; width: floor(650 / 2.3242 / 28) =
    # floor(9.99) = 9 -> 252
    assert model_input_size(processor, Image.new("RGB", (650, 417))) == (252, 168)
