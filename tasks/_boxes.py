"""Reference boxes from data cells, and a whole-file check that the declared `box_format` fits.

A wrong box convention does not fail row by row: COCO `[x, y, w, h]` read as `[x1, y1, x2, y2]`
passes for every box whose width exceeds its x (27 of the 30 in a small COCO sample), and boxes
normalised to 0-1 read as pixels all pass. So the file is judged as a whole before any sample is
built: all boxes inside [0, 1], or several boxes inverted under the declared format that the
other format reads cleanly, stop the build with one line naming the file, the evidence and the
`box_format` to set.
"""

from __future__ import annotations

import json
import math
from typing import Iterable

from mmrlvr.data.io import BadRow, DataError
from mmrlvr.data.staged import shown

BOX_FORMATS = ("xyxy", "xywh", "xyxy_norm", "xywh_norm")
ACCEPTED = ("accepted forms: [x1, y1, x2, y2] (a list or a \"x1, y1, x2, y2\" string), "
            "{xmin, ymin, xmax, ymax}, {x1, y1, x2, y2}, {x, y, w, h} or {x, y, width, height}; "
            "box_format: xyxy (default) | xywh | xyxy_norm | xywh_norm (_norm: 0-1 of the image size)")
_DICT_XYXY = (("xmin", "ymin", "xmax", "ymax"), ("x1", "y1", "x2", "y2"))
_DICT_XYWH = (("x", "y", "w", "h"), ("x", "y", "width", "height"))


def check_box_format(fmt: str) -> str:
    if fmt not in BOX_FORMATS:
        raise ValueError(f"box_format {fmt!r} unknown; known: {', '.join(BOX_FORMATS)}")
    return fmt


def _cut(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def box_numbers(value) -> tuple[list[float], str | None]:
    """(four numbers, "xywh" when the cell itself says so else None) of a box cell; BadRow if not a box."""
    raw, implied = value, None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text if text.startswith(("[", "{")) else f"[{text}]")
        except ValueError:
            raise BadRow(f"box {_cut(raw)} cannot be parsed; {ACCEPTED}") from None
    if isinstance(value, dict):
        keys = next((k for k in _DICT_XYXY if all(x in value for x in k)), None)
        if keys is None:
            keys, implied = next((k for k in _DICT_XYWH if all(x in value for x in k)), None), "xywh"
        if keys is None:
            raise BadRow(f"box {_cut(raw)} cannot be parsed (keys {sorted(value)}); {ACCEPTED}")
        value = [value[k] for k in keys]
    try:
        box = [float(v) for v in value]
    except (TypeError, ValueError):
        raise BadRow(f"box {_cut(raw)} cannot be parsed; {ACCEPTED}") from None
    if len(box) != 4 or not all(math.isfinite(v) for v in box):
        raise BadRow(f"box {_cut(raw)} is not four finite numbers; {ACCEPTED}")
    return box, implied


def to_xyxy(box: list[float], fmt: str) -> list[float]:
    """[x1, y1, x2, y2] of four numbers read in `fmt` ("xyxy" or "xywh", `_norm` ignored here)."""
    if fmt.startswith("xywh"):
        return [box[0], box[1], box[0] + box[2], box[1] + box[3]]
    return list(box)


def parse_box(value, fmt: str = "xyxy", image_size: tuple | None = None) -> list[float]:
    """A box cell as [x1, y1, x2, y2] in pixels; `_norm` formats are scaled by `image_size` (w, h)."""
    check_box_format(fmt)
    box, implied = box_numbers(value)
    box = to_xyxy(box, implied or fmt)
    if fmt.endswith("_norm"):
        if not image_size:
            raise BadRow(f"box {_cut(value)}: box_format {fmt} needs the image size, which is unknown")
        w, h = image_size
        box = [box[0] * w, box[1] * h, box[2] * w, box[3] * h]
    if box[2] <= box[0] or box[3] <= box[1]:
        raise BadRow(f"box {_cut(value)} read as {fmt} is {box}: it has no area (x2 <= x1 or y2 <= y1)")
    return box


def box_outside(box: list[float], size: tuple) -> bool:
    """Whether an [x1, y1, x2, y2] pixel box leaves its (width, height) image (1e-6 px float slack):
    no answer inside the image could match it, so its row could never score."""
    w, h = size
    eps = 1e-6
    return not (-eps <= box[0] and -eps <= box[1] and box[2] <= w + eps and box[3] <= h + eps)


def _inverted(box: list[float]) -> bool:
    return box[2] <= box[0] or box[3] <= box[1]


def convention_problem(source: str, cells: Iterable[tuple[int, object]], fmt: str) -> str | None:
    """Why the boxes of a whole file do not fit `fmt` (one line), or None.

    `cells` are (row, raw box cell). Cells that are not boxes at all are left to the row checks.
    """
    boxes = []
    for row, cell in cells:
        try:
            numbers, implied = box_numbers(cell)
        except BadRow:
            continue
        if implied is None:  # a dict that names its own convention is never ambiguous
            boxes.append((row, numbers))
    if not boxes:
        return None
    n = len(boxes)
    if not fmt.endswith("_norm") and all(0.0 <= v <= 1.0 for _, b in boxes for v in b):
        row, example = boxes[0]
        return (f"{shown(source)}: all {n} boxes lie within [0, 1] (row {row}: {example}): they look normalised to the "
                f"image size, not pixels; set task.args.box_format: {fmt}_norm")
    if fmt.endswith("_norm") and any(v > 1.0 for _, b in boxes for v in b):
        row, example = next((r, b) for r, b in boxes if max(b) > 1.0)
        return (f"{shown(source)}: box_format {fmt} says 0-1 but row {row} has {example}; "
                f"set task.args.box_format: {fmt[:-5]} for pixel boxes")
    base = fmt[:4]
    bad = [(r, b) for r, b in boxes if _inverted(to_xyxy(b, base))]
    other = "xywh" if base == "xyxy" else "xyxy"
    if len(bad) >= max(2, math.ceil(0.05 * n)) and not any(_inverted(to_xyxy(b, other)) for _, b in boxes):
        row, example = bad[0]
        return (f"{shown(source)}: {len(bad)} of {n} boxes have x2 <= x1 or y2 <= y1 when read as {base} (row {row}: "
                f"{example}) while all read cleanly as {other}: set task.args.box_format: "
                f"{other}{fmt[4:]}")
    return None


def require_convention(source: str, cells: Iterable[tuple[int, object]], fmt: str) -> None:
    why = convention_problem(source, cells, fmt)
    if why:
        raise DataError(why)
