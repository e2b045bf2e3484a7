"""Figures without pyplot's global state: safe in scripts, tests and notebooks alike.

`matplotlib.figure.Figure` renders with the Agg canvas when saved, whatever backend is active, and
nothing accumulates in a global figure list; notebooks display the saved PNG.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def new_figure(rows: int, cols: int, panel: float = 3.0, width: float | None = None, height: float | None = None):
    """(figure, axes as a rows x cols nested list) with `panel` inches per panel."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width or panel * cols, height or panel * rows), layout="constrained")
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False)).tolist()
    return fig, axes


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Write `fig` as a PNG (parent folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path


def figure_to_array(fig, dpi: int = 100) -> np.ndarray:
    """(H, W, 4) uint8 RGBA pixels of a rendered figure, for tests and compositing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    fig.set_dpi(dpi)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def as_pil(media) -> Image.Image:
    """A PIL image from a PIL image, an (H, W, 3) uint8 array, or a media reference (path, bytes)."""
    if isinstance(media, Image.Image):
        return media.convert("RGB")
    if isinstance(media, np.ndarray):
        return Image.fromarray(np.asarray(media, dtype=np.uint8)).convert("RGB")
    from mmrlvr.data.media import load_image

    return load_image(media).convert("RGB")


def image_grid(images, titles=None, ncols: int = 4, panel: float = 2.6, title: str | None = None):
    """Figure of images (PIL, arrays, paths or encoded bytes, as samples hold them) in rows of `ncols`,
    each with an optional title (e.g. a completion and its verdict)."""
    images = list(images)
    titles = list(titles) if titles is not None else [""] * len(images)
    ncols = max(1, min(ncols, len(images)))
    nrows = -(-len(images) // ncols)
    fig, axes = new_figure(nrows, ncols, panel=panel)
    flat = [a for row in axes for a in row]
    for ax, img, name in zip(flat, images, titles):
        ax.imshow(as_pil(img))
        ax.set_title(name, fontsize=8)
    for ax in flat:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
