"""Media references and their decoding.

A `Sample` holds references, never decoded pixels for the whole run: a path (str or Path), raw
encoded bytes, a `{"bytes": ..., "path": ...}` dict as `datasets.Image` stores it in Parquet, a
`RowRef` into a memory-mapped Arrow table, or (for small synthetic in-memory tasks) a PIL image.
`load_image` decodes one when its batch is encoded. Every failure is a `MediaError` whose message
names the file (or row) and what went wrong, so a bad file can be dropped and reported.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from mmrlvr.data.media_error import MediaError
# video decoding lives in mmrlvr/data/video.py; its public names are re-exported so that
# `mmrlvr.data.media` stays the one module callers import
from mmrlvr.data.video import (
    DEFAULT_FPS, FRAME_FACTOR, VIDEO_BACKENDS, ShuffledVideo, VideoRef, decode_video, fit_pixels,
    fit_total_pixels, load_video, processor_metadata, resize_frames, sample_indices, shuffle_order,
)

MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485
"""Larger images are refused before decoding (Pillow only warns between this and twice it, and
one 170 MP image takes 1.4 GB decoded)."""
MAX_ASPECT_RATIO = 200.0
"""The Qwen-VL image processors raise on a longer side over 200x the shorter ("absolute aspect
ratio must be smaller than 200"); such an image is bad media, refused here before its batch."""


@dataclass(frozen=True)
class RowRef:
    """An image cell of a `datasets.Dataset` (Arrow, memory-mapped): fetched only when decoded.

    `index` picks one image of a list cell (multi-image rows). `source` names the data file for
    messages. The dataset object is shared by every reference, so 100k rows cost 100k small
    records, not 100k images.
    """

    dataset: Any  # datasets.Dataset
    row: int
    column: str
    index: int | None = None
    source: str = ""
    root: str | None = None  # where relative paths inside the cell resolve

    def fetch(self) -> Any:
        """The stored cell (bytes, a {"bytes", "path"} dict or a path string) of one row.

        `dataset` is an Arrow-formatted view (`ds.with_format("arrow")`): indexing it slices the
        memory-mapped table without decoding anything.
        """
        value = self.dataset[self.row].column(self.column)[0].as_py()
        return value[self.index] if self.index is not None else value

    def __repr__(self) -> str:
        where = f"[{self.index}]" if self.index is not None else ""
        return f"RowRef({self.source or 'dataset'} row {self.row} {self.column}{where})"


def describe(ref: Any) -> str:
    """A short human name for a media reference (used in warnings and errors)."""
    if isinstance(ref, (str, Path)):
        return str(ref)
    if isinstance(ref, RowRef):
        return repr(ref)
    if isinstance(ref, dict):
        if ref.get("path"):
            return str(ref["path"])
        data = ref.get("bytes")
        return f"<{len(data)} bytes>" if isinstance(data, (bytes, bytearray)) else "<image dict without bytes or path>"
    if isinstance(ref, (bytes, bytearray, memoryview)):
        return f"<{len(ref)} bytes>"
    if isinstance(ref, Image.Image):
        return f"<in-memory {ref.width}x{ref.height} image>"
    return f"<{type(ref).__name__}>"


def _resolve(path: str | Path, root: str | Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or root is None else Path(root) / p


def _open(ref: Any, root: str | Path | None) -> tuple[Image.Image, str]:
    """Open (not yet decode) an image from any reference kind; returns it and its name."""
    if isinstance(ref, RowRef):
        return _open(ref.fetch(), ref.root or root)[0], repr(ref)
    if isinstance(ref, Image.Image):
        return ref, describe(ref)
    if isinstance(ref, (bytes, bytearray, memoryview)):
        return Image.open(io.BytesIO(bytes(ref))), describe(ref)
    if isinstance(ref, dict):
        if ref.get("bytes"):
            return Image.open(io.BytesIO(bytes(ref["bytes"]))), describe(ref)
        if ref.get("path"):
            path = _resolve(ref["path"], root)
            return Image.open(path), str(path)
        raise MediaError("image dict has neither bytes nor path")
    if isinstance(ref, (str, Path)):
        path = _resolve(ref, root)
        return Image.open(path), str(path)
    raise MediaError(f"not an image reference: {type(ref).__name__}")


def load_image(ref: Any, root: str | Path | None = None, mode: str = "RGB") -> Image.Image:
    """Decode one image reference into a fully loaded PIL image in `mode`.

    `root` resolves relative paths. Raises `MediaError` naming the file on any failure: missing
    file, unknown format, truncated data, an image over Pillow's decompression-bomb limit.
    """
    name = describe(ref)
    try:
        img, name = _open(ref, root)
        check_image_size(img.width, img.height)  # from the header, before any pixel is decoded
        img.load()  # decode now, inside the try: truncated files fail here, not in the processor
        if img.mode == mode:
            return img
        return to_8bit(img).convert(mode)
    except MediaError as exc:
        raise MediaError(f"{name}: {exc}") from None
    except IsADirectoryError:
        raise MediaError(f"{name}: is a directory, not an image file") from None
    except FileNotFoundError:
        raise MediaError(f"{name}: file not found") from None
    except Image.DecompressionBombError as exc:
        raise MediaError(f"{name}: too large to decode ({exc})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # Pillow's decode failures
        raise MediaError(f"{name}: cannot decode image ({type(exc).__name__}: {exc})") from None


def check_image_size(width: int, height: int) -> None:
    """Raise MediaError for an image too large to decode or one the processor would refuse."""
    if width < 1 or height < 1:
        raise MediaError(f"image is {width}x{height} pixels")
    if width * height > MAX_IMAGE_PIXELS:
        raise MediaError(f"too large to decode ({width}x{height} = {width * height / 1e6:.0f} MP, "
                         f"more than {MAX_IMAGE_PIXELS / 1e6:.0f} MP)")
    ratio = max(width, height) / min(width, height)
    if ratio > MAX_ASPECT_RATIO:
        raise MediaError(f"aspect ratio {ratio:.0f}:1 ({width}x{height}) is over the image processor's "
                         f"limit of {MAX_ASPECT_RATIO:.0f}:1")


def to_8bit(img: Image.Image) -> Image.Image:
    """16-bit and 32-bit integer or float images as 8-bit "L", scaled, not clipped.

    Pillow's `convert("RGB")` clips an `I;16` image at 255, so a 16-bit photo or scan (values up to
    65535) turns white. Integer images are divided by 257 (65535 -> 255) when they use more than 8
    bits; float images in [0, 1] are scaled by 255."""
    if img.mode not in ("I", "F") and not img.mode.startswith("I;16"):
        return img
    import numpy as np

    a = np.asarray(img)
    if img.mode == "F":
        scale = 255.0 if float(np.nanmax(a, initial=0.0)) <= 1.0 else 1.0
        a = np.nan_to_num(a.astype(np.float64) * scale)
    else:  # I;16*: 16 bits by definition; "I" (32-bit): scaled only when it uses more than 8 bits
        a = a.astype(np.float64)
        if img.mode != "I" or a.max(initial=0) > 255:
            a = a / 257.0
    return Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8), "L")
