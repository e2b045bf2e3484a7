"""The zoom tool's pure parts: the call a policy writes, `<zoom>[x1, y1, x2, y2]</zoom>`, the
box's validation in the image's pixel frame, and the crop enlarged within a pixel limit. In the
data layer so tasks (their warm-start demonstrations) and the `tools` episode share them."""

from __future__ import annotations

import math
import re

ZOOM = re.compile(r"<(zoom|crop)>\s*(?:\[\s*)?(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*(?:\]\s*)?</(?:zoom|crop)>")
"""Linear in the text's length: no two runs of whitespace can meet without a literal between them (an
optional `[` or `]` takes its own spaces inside its group), so `<zoom>` and 10,000 spaces fail at once
instead of in quadratic time (seconds, holding the GIL past the turn's time limit)."""
MIN_SIDE = 4
"""Smallest crop side in image pixels: a smaller box has nothing to enlarge."""
RESULT_TEXT = "Zoomed region {box}:"


def parse_call(text: str) -> tuple[int, int, int, int] | None:
    """The first `<zoom>[x1, y1, x2, y2]</zoom>` (or `<crop>`) box in `text`, or None."""
    m = ZOOM.search(text)
    return tuple(int(v) for v in m.groups()[1:]) if m else None


def box_problem(box: tuple[int, int, int, int], size: tuple[int, int]) -> str | None:
    """Why `box` cannot be cropped from an image of `size` (width, height), or None."""
    x1, y1, x2, y2 = box
    w, h = size
    if not (0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h):
        return f"box {list(box)} is not inside the {w}x{h} image with x1 < x2, y1 < y2"
    if min(x2 - x1, y2 - y1) < MIN_SIDE:
        return f"box {list(box)} is smaller than {MIN_SIDE} pixels a side"
    return None


def zoom_size(box: tuple[int, int, int, int], max_pixels: int) -> tuple[int, int]:
    """(width, height) of the enlarged crop: the box's aspect ratio, at most `max_pixels` pixels,
    never smaller than the box itself."""
    w, h = box[2] - box[0], box[3] - box[1]
    scale = max(1.0, math.sqrt(max_pixels / (w * h)))
    return max(1, math.floor(w * scale)), max(1, math.floor(h * scale))


def zoom(image, box: tuple[int, int, int, int], max_pixels: int):
    """The region `box` of a PIL image, enlarged within `max_pixels` (bicubic)."""
    from PIL import Image

    return image.crop(box).resize(zoom_size(box, max_pixels), Image.BICUBIC)
