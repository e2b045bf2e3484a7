"""Each family's box convention maps back onto the original image: a box drawn at a known place
in a 200x100 image, answered in the family's frame, scores IoU 1 against the drawn box."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

from mmrlvr.data.collate import encode_prompts
from mmrlvr.data.prompts import build_messages
from mmrlvr.models.families import FAMILIES
from mmrlvr.types import Sample
from mmrlvr.verifiers.grounding import family_box_format, iou_verifier

DRAWN = (50, 20, 149, 79)  # PIL's inclusive corners: the red block covers x 50..149, y 20..79
# The answer each family should give for that block, by hand, for a 200x100 image:
ANSWERS = {
    # pixels of the resized image: Qwen2.5-VL rounds 200x100 to multiples of 28 -> 196x112, so
    # x scales by 196/200 = 0.98 and y by 112/100 = 1.12: [50*0.98, 20*1.12, 150*0.98, 80*1.12]
    "absolute": [49.0, 22.4, 147.0, 89.6],
    "norm1000": [250, 200, 750, 800],  # [50/200, 20/100, 150/200, 80/100] * 1000
    "norm1": [0.25, 0.2, 0.75, 0.8],
}


def _drawn_box(img) -> list[float]:
    """The red block's box in pixel-edge coordinates, found in the image itself."""
    red = np.argwhere((np.asarray(img)[:, :, 0] > 200) & (np.asarray(img)[:, :, 1] < 50))
    (y1, x1), (y2, x2) = red.min(0), red.max(0)
    return [float(x1), float(y1), float(x2 + 1), float(y2 + 1)]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_family_box_frame_maps_back_to_the_drawn_box(model_type, family_policy):
    _, processor = family_policy(model_type)
    img = Image.new("RGB", (200, 100), (235, 235, 235))
    ImageDraw.Draw(img).rectangle(DRAWN, fill=(230, 20, 20))
    fmt = family_box_format(model_type)
    messages, images = build_messages("", [img], "Where is the red block?")
    sample = Sample(id="g", messages=messages, images=images, reference=_drawn_box(img), verifier="iou",
                    meta={"box_format": fmt, "image_size": [200, 100], "input_size": None})
    assert sample.reference == [50.0, 20.0, 150.0, 80.0]
    encode_prompts(processor, [sample])  # fills meta.input_size where the family answers in resized pixels
    if fmt == "absolute":
        assert sample.meta["input_size"] == [196, 112]
    verdict = iou_verifier(f"<answer>{ANSWERS[fmt]}</answer>", sample)
    assert verdict.score == pytest.approx(1.0, abs=1e-6), (model_type, verdict.reason)
    # the same numbers read in another family's frame land elsewhere
    other = "norm1000" if fmt != "norm1000" else "norm1"
    wrong = Sample(id="g", messages=messages, images=images, reference=sample.reference, verifier="iou",
                   meta={**sample.meta, "box_format": other})
    assert iou_verifier(f"<answer>{ANSWERS[fmt]}</answer>", wrong).score < 0.5


def test_family_frames_are_the_documented_ones():
    assert {m: family_box_format(m) for m in FAMILIES} == {
        "qwen2_5_vl": "absolute", "qwen2_vl": "norm1000", "qwen3_vl": "norm1000", "gemma3": "norm1000",
        "idefics3": "norm1", "llava_onevision": "norm1"}
    assert family_box_format("some_new_vlm") == "absolute"
