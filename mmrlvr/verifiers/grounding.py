"""Grounding verifiers: parse boxes from a completion, map them to the image, score IoU."""

from __future__ import annotations

import json
import math
import re
from types import MappingProxyType

from mmrlvr.models.family_spec import BOX_FORMATS, DEFAULT_FAMILY, family_specs  # noqa: F401  (BOX_FORMATS re-exported)
from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import BadReference, finite_reference, register_verifier
from mmrlvr.verifiers.extract import final_answer
from mmrlvr.verifiers.geometry import giou, iou

# Linear by construction: one way to match each number (`\d+\.?\d*` could split a digit run
# anywhere: cubic on "[" + 1,000 digits), bounded runs of digits and blanks, no nested alternation.
_NUM = r"[-+]?(?:\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][-+]?\d{1,4})?|nan|inf"
_S = r"\s{0,8}"
_PAIR_BOX = re.compile(rf"\({_S}({_NUM}){_S},{_S}({_NUM}){_S}\){_S},?{_S}\({_S}({_NUM}){_S},{_S}({_NUM}){_S}\)", re.I)
_LIST_BOX = re.compile(rf"\[{_S}({_NUM}){_S},{_S}({_NUM}){_S},{_S}({_NUM}){_S},{_S}({_NUM}){_S}\]", re.I)
MAX_TEXT = 20_000
# The coordinates each model family answers boxes in (`meta.box_format`), by `config.model_type`:
# the `box_format` of its record (`mmrlvr.models.family_spec`, where each one's reason is noted),
# its aliases' too (smolvlm is idefics3). Model types with no family record that still have a known
# convention are listed here: Qwen3-VL's MoE and InternVL answer in relative 0-1000 of the image.
# Any other model type: absolute pixels. The task writes the unit into the prompt (tasks/grounding.py).
OTHER_BOX_FORMATS = {"qwen3_vl_moe": "norm1000", "internvl": "norm1000"}


def family_box_formats() -> dict[str, str]:
    """model_type -> box convention of every family record, alias and model type above (also
    `FAMILY_BOX_FORMATS`, made on each access so a record registered later is in it)."""
    out = dict(OTHER_BOX_FORMATS)
    for spec in family_specs():  # a record's convention wins over the list above
        out.update(dict.fromkeys((spec.model_type, *spec.aliases), spec.box_format))
    return out


def __getattr__(name: str):
    if name == "FAMILY_BOX_FORMATS":
        return MappingProxyType(family_box_formats())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def family_box_format(model_type: str | None) -> str:
    """The box convention of a model family (see FAMILY_BOX_FORMATS); unknown: absolute pixels."""
    return family_box_formats().get(model_type or DEFAULT_FAMILY, "absolute")


def _float(v) -> float:
    try:
        return float(v)
    except OverflowError:  # a 400-digit JSON integer: unusable, not an error
        return math.inf if v > 0 else -math.inf


def _from_json(obj) -> list[list[float]] | None:
    if isinstance(obj, dict):
        for key in ("bbox_2d", "bbox", "box"):
            if key in obj:
                return _from_json(obj[key])
        return None
    if isinstance(obj, list):
        if len(obj) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj):
            return [[_float(v) for v in obj]]
        out = []
        for item in obj:
            boxes = _from_json(item)
            if boxes is None:
                return None
            out.extend(boxes)
        return out
    return None


def parse_boxes(text: str) -> list[list[float]]:
    """Every box in a completion, as [x1, y1, x2, y2] floats in the order written.

    Formats: a JSON list (or list of lists), JSON objects with `bbox_2d`, Qwen2-VL's
    `<|box_start|>(x1,y1),(x2,y2)<|box_end|>` and plain `(x1, y1), (x2, y2)`.
    """
    text = text[-MAX_TEXT:]
    stripped = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        boxes = _from_json(json.loads(stripped))
        if boxes is not None:
            return boxes
    except (ValueError, RecursionError):
        pass
    text = text.replace("<|box_start|>", " ").replace("<|box_end|>", " ")
    found = [(m.start(), [float(x) for x in m.groups()]) for m in _PAIR_BOX.finditer(text)]
    found += [(m.start(), [float(x) for x in m.groups()]) for m in _LIST_BOX.finditer(text)]
    return [b for _, b in sorted(found)]


def checked_meta(sample) -> dict:
    """The sample's meta with image_size, input_size, box_format and thresholds checked.

    Raises BadReference: a NaN size or threshold would make every box pass (or none)."""
    meta = dict(getattr(sample, "meta", None) or {})
    for key in ("image_size", "input_size"):
        if meta.get(key) is not None:
            w, h = finite_reference(meta[key], 2, f"meta.{key}")
            if w <= 0 or h <= 0:
                raise BadReference(f"meta.{key} {[w, h]} is not positive")
    if meta.get("box_format", "absolute") not in BOX_FORMATS:
        raise BadReference(f"meta.box_format {meta['box_format']!r} unknown; known: {', '.join(BOX_FORMATS)}")
    if meta.get("box_format") in ("norm1000", "norm1") and not meta.get("image_size"):
        raise BadReference(f"meta.box_format {meta['box_format']} needs meta.image_size")
    for key in ("threshold", "iou_threshold"):
        if meta.get(key) is not None:
            (t,) = finite_reference([meta[key]], 1, f"meta.{key}")
            if not 0.0 <= t <= 1.0:
                raise BadReference(f"meta.{key} {t} is not in [0, 1]")
    return meta


def reference_box(box, what: str = "reference box") -> list[float]:
    """A reference box as 4 finite floats with x2 > x1 and y2 > y1, else BadReference."""
    b = finite_reference(box if isinstance(box, (list, tuple)) else [box], 4, what)
    if b[2] <= b[0] or b[3] <= b[1]:
        raise BadReference(f"{what} {b} has no area (x2 <= x1 or y2 <= y1)")
    return b


def to_image_frame(box: list[float], meta: dict) -> list[float]:
    """Map a predicted box into pixels of the original image per meta.box_format."""
    fmt = meta.get("box_format", "absolute")
    w, h = meta.get("image_size") or (None, None)
    if fmt == "absolute":
        if meta.get("input_size") and w:
            iw, ih = meta["input_size"]
            return [box[0] * w / iw, box[1] * h / ih, box[2] * w / iw, box[3] * h / ih]
        return list(box)
    if fmt in ("norm1000", "norm1"):
        if not w:
            raise BadReference(f"box_format {fmt} needs meta.image_size")
        scale = 1000.0 if fmt == "norm1000" else 1.0
        return [box[0] / scale * w, box[1] / scale * h, box[2] / scale * w, box[3] / scale * h]
    raise BadReference(f"unknown box_format {fmt!r}; known: {', '.join(BOX_FORMATS)}")


def check_box(box: list[float], meta: dict) -> str | None:
    """Why a box is unusable (non-finite, degenerate, absurd), or None."""
    if not all(math.isfinite(v) for v in box):
        return "non-finite coordinate"
    if box[2] <= box[0] or box[3] <= box[1]:
        return "degenerate box (x2 <= x1 or y2 <= y1)"
    w, h = meta.get("image_size") or (None, None)
    limit = 2.0 * max(w, h) if w else 1e5
    if min(box) < -0.5 * limit or max(box) > limit:
        return "coordinates far outside the image"
    return None


def _score(pred: list[float], ref: list[float], meta: dict) -> tuple[float, float]:
    value = iou(pred, ref)
    if meta.get("metric") == "giou":
        score = (giou(pred, ref) + 1.0) / 2.0
    else:
        score = value
    if meta.get("threshold") is not None:
        score = float(value >= float(meta["threshold"]))
    return score, value


@register_verifier("iou", "IoU of one predicted box with the reference box (pixels of the original image)", headline="mean_iou")
def iou_verifier(completion: str, sample) -> Verdict:
    """Score = IoU (or (GIoU+1)/2, or IoU >= threshold); more than one box scores 0."""
    meta = checked_meta(sample)
    ref = reference_box(sample.reference)
    text, failed = final_answer(completion, fallback_to_text=True)
    if failed:
        return failed
    boxes = parse_boxes(text)
    if not boxes:
        return Verdict(0.0, "no box found", {"iou": 0.0})
    if len(boxes) > 1:
        return Verdict(0.0, f"{len(boxes)} boxes for a single-box answer", {"iou": 0.0})
    box = to_image_frame(boxes[0], meta)
    bad = check_box(box, meta)
    if bad:
        return Verdict(0.0, bad, {"iou": 0.0})
    score, value = _score(box, ref, meta)
    return Verdict(score, f"IoU {value:.3f}", {"iou": value})


@register_verifier("boxes", "several boxes: Hungarian matching on IoU, F1 at IoU >= 0.5 (or mean_iou)", headline="box_f1")
def boxes_verifier(completion: str, sample) -> Verdict:
    """Duplicates and extra boxes cost precision; missed references cost recall."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    meta = checked_meta(sample)
    if not isinstance(sample.reference, (list, tuple)):
        raise BadReference(f"boxes reference {str(sample.reference)[:40]!r} is not a list of boxes")
    refs = [reference_box(b, f"reference box {i}") for i, b in enumerate(sample.reference)]
    text, failed = final_answer(completion, fallback_to_text=True)
    if failed:
        return failed
    preds = parse_boxes(text)
    if len(preds) > 10 * max(len(refs), 1) + 10:
        return Verdict(0.0, f"{len(preds)} boxes: far too many")
    mapped = [to_image_frame(b, meta) for b in preds]
    usable = [b for b in mapped if check_box(b, meta) is None]
    if not refs:
        return Verdict(float(not mapped), "no reference boxes")
    if not usable:
        return Verdict(0.0, "no usable box", {"precision": 0.0, "recall": 0.0})
    m = np.array([[iou(p, r) for r in refs] for p in usable])
    rows, cols = linear_sum_assignment(-m)
    matched = m[rows, cols]
    thr = float(meta.get("iou_threshold", 0.5))
    tp = int((matched >= thr).sum())
    precision, recall = tp / len(mapped), tp / len(refs)
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    mean_iou = float(matched.sum()) / max(len(mapped), len(refs))
    score = mean_iou if meta.get("metric") == "mean_iou" else f1
    return Verdict(score, f"{tp} of {len(refs)} matched, {len(mapped)} predicted",
                   {"precision": precision, "recall": recall, "mean_iou": mean_iou})


def _import_matching() -> None:
    import numpy  # noqa: F401
    from scipy.optimize import linear_sum_assignment  # noqa: F401


boxes_verifier.warmup = _import_matching  # a 1-3 s import, outside the time bound
