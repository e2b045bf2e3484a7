"""Helpers for synthetic tasks: held-out items drawn first and excluded from training, and
images stored as small PNG bytes (decoded per batch, like any real dataset's images)."""

from __future__ import annotations

import io
import random
from typing import Callable, Hashable

from PIL import Image


def png_bytes(img: Image.Image) -> bytes:
    """A drawn image as PNG bytes: ~1-3 KB for a 112x112 synthetic board instead of 37 KB of pixels."""
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def draw_shape(draw, shape: str, x0: float, y0: float, size: float, fill) -> None:
    """A filled circle, square or (upward) triangle in the size x size box at (x0, y0): the shapes
    every synthetic board task draws, in one place so they look the same everywhere."""
    box = (x0, y0, x0 + size, y0 + size)
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(x0 + size / 2, y0), (x0, y0 + size), (x0 + size, y0 + size)], fill=fill)


def draw_cell_shapes(draw, cells, per_row: int, colors: dict, rng: random.Random, sizes: tuple[int, int],
                     margin: int, cell: int = 28) -> None:
    """(cell index, colour name, shape) items, each shape of a random size in `sizes` placed at a
    random offset at least `margin` px inside its `cell`-px square of a `per_row`-wide grid."""
    for index, color, shape in cells:
        r, c = divmod(index, per_row)
        size = rng.randint(*sizes)
        x0 = c * cell + rng.randint(margin, cell - size - margin)
        y0 = r * cell + rng.randint(margin, cell - size - margin)
        draw_shape(draw, shape, x0, y0, size, colors[color])


def seeded_items(name: str, split: str, size: int, seed: int, draw: Callable[[random.Random], Hashable],
                 eval_size: int = 256, max_tries: int = 100,
                 key: Callable[[Hashable], Hashable] = lambda item: item) -> tuple[list, random.Random]:
    """`size` items for a split and the RNG that drew them.

    Eval items come from their own seeded stream; training items whose `key` (by default the item;
    a task passes "what the image shows") equals an eval item's are redrawn, so no held-out image
    appears in training.
    """
    eval_rng = random.Random(f"{name}-eval-{seed}")
    n_eval = eval_size if split == "train" else size
    evals = [draw(eval_rng) for _ in range(n_eval)]
    if split == "eval":
        return evals, eval_rng
    if split != "train":
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    rng, seen, items = random.Random(f"{name}-train-{seed}"), {key(e) for e in evals}, []
    tries = 0
    while len(items) < size:
        item = draw(rng)
        if key(item) not in seen:
            items.append(item)
        else:
            tries += 1
            if tries > max_tries * max(size, 1):
                raise ValueError(f"{name}: cannot draw {size} training items distinct from the held-out ones")
    return items, rng
