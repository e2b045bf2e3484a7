"""Predicted vs reference boxes on the original image, with the IoU the `iou` verifier computes.

A predicted box is read from the completion exactly as the verifier reads it (`final_answer`,
`parse_boxes`) and mapped into the original image's pixels with the verifier's own
`to_image_frame` (per `meta.box_format`, `image_size`, `input_size`); the reference is already
in original pixels. So the picture shows what was scored, not a second interpretation.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image, ImageDraw

from mmrlvr.verifiers.extract import final_answer
from mmrlvr.verifiers.geometry import iou
from mmrlvr.verifiers.grounding import check_box, parse_boxes, to_image_frame
from mmrlvr.viz.heatmap import as_pil

REF_COLOR = (0, 200, 0)  # green: the reference box
PRED_COLOR = (230, 0, 0)  # red: the predicted box


@dataclass
class BoxReading:
    """What a completion's box is, in original image pixels, and how it scores."""

    pred: list[float] | None  # mapped predicted box, or None when there is none usable
    ref: list[float]  # reference box in original pixels
    iou: float | None  # IoU of pred and ref; None without a usable prediction
    note: str  # "IoU 0.53", or why there is no usable box


def read_box(completion: str, reference, meta: dict | None = None) -> BoxReading:
    """The completion's single box mapped to the original image, scored by the `iou` verifier."""
    from mmrlvr.types import Sample
    from mmrlvr.verifiers.grounding import iou_verifier

    meta = dict(meta or {})
    ref = [float(v) for v in reference]
    verdict = iou_verifier(completion, Sample(id="viz", messages=(), reference=ref, verifier="iou", meta=meta))
    text, failed = final_answer(completion, fallback_to_text=True)
    boxes = parse_boxes(text) if not failed else []
    if len(boxes) != 1:
        return BoxReading(None, ref, None, verdict.reason)
    box = to_image_frame(boxes[0], meta)
    if check_box(box, meta):
        return BoxReading(None, ref, None, verdict.reason)
    return BoxReading(box, ref, float(verdict.parts.get("iou", iou(box, ref))), verdict.reason)


def _line_width(size: tuple[int, int]) -> int:
    return max(2, min(size) // 100)


def draw_boxes(image, pred: list[float] | None, ref: list[float] | None, label: str | None = None) -> Image.Image:
    """A copy of `image` with the reference (green) and prediction (red) outlined, in its pixels.

    Boxes are [x1, y1, x2, y2] in original image pixels; the outline is drawn inside the box so
    the box's own edge pixels carry its colour. `label` is written at the top left (e.g. the IoU).
    """
    out = as_pil(image).copy()
    draw = ImageDraw.Draw(out)
    width = _line_width(out.size)
    for box, color in ((ref, REF_COLOR), (pred, PRED_COLOR)):
        if box is not None:
            x1, y1, x2, y2 = (round(v) for v in box)
            draw.rectangle([x1, y1, x2 - 1, y2 - 1], outline=color, width=width)
    if label:
        pad = 2
        left, top, right, bottom = draw.textbbox((pad, pad), label)
        draw.rectangle([left - pad, top - pad, right + pad, bottom + pad], fill=(0, 0, 0))
        draw.text((pad, pad), label, fill=(255, 255, 255))
    return out


def draw_prediction(image, completion: str, reference, meta: dict | None = None) -> tuple[Image.Image, BoxReading]:
    """`image` with the completion's box (red) against the reference (green), labelled with the IoU."""
    reading = read_box(completion, reference, meta)
    return draw_boxes(image, reading.pred, reading.ref, reading.note), reading


def plot_grounding(items: list[tuple], title: str | None = None, panel: float = 3.2):
    """Figure of (image, completion, reference, meta) items, one panel each, IoU in the titles."""
    from mmrlvr.viz.figure import new_figure

    fig, axes = new_figure(1, len(items), panel=panel)
    for ax, (image, completion, reference, meta) in zip(axes[0], items):
        drawn, reading = draw_prediction(image, completion, reference, meta)
        ax.imshow(drawn)
        short = completion if len(completion) <= 40 else completion[:37] + "..."
        ax.set_title(f"{reading.note}\n{short!r}", fontsize=8)
        ax.axis("off")
    fig.suptitle(title or "green: reference, red: prediction (original image pixels)", fontsize=10)
    return fig


def model_input_size(processor, image) -> tuple[int, int]:
    """(width, height) in pixels of `image` as the model sees it after the processor's resize.

    Qwen2.5-VL writes boxes in these pixels: pass it as `meta["input_size"]` (with the original
    `image_size`) so the verifier and `draw_prediction` map the box back onto the original image.
    """
    ip = processor.image_processor
    grid = ip(images=[as_pil(image)], return_tensors="pt")["image_grid_thw"][0].tolist()
    patch = getattr(ip, "patch_size", 14)
    return int(grid[2] * patch), int(grid[1] * patch)
