"""Attention maps drawn on the original image or video frames."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from mmrlvr.viz.attention import AttentionResult, MediaMap, temporal_profile, upsample
from mmrlvr.viz.figure import as_pil, new_figure  # noqa: F401 (as_pil: re-exported)


def sample_frames(processor, sample) -> list[list[Image.Image]]:
    """The frames of each of the sample's videos exactly as `encode_prompts` feeds them to the
    processor (same sampling, frame cap and pixel limits), so frame 2k starts temporal patch k."""
    from mmrlvr.data.collate import video_limits
    from mmrlvr.data.media import decode_video, fit_total_pixels

    lim = video_limits(processor)
    decoded = [decode_video(v, max_frames=lim.get("max_frames"), max_pixels=lim.get("max_pixels")) for v in sample.videos]
    return [[Image.fromarray(f) for f in frames] for frames, _ in fit_total_pixels(decoded, lim.get("total_pixels"))]


def overlay_heatmap(image, weights: np.ndarray, alpha: float = 0.55, cmap: str = "inferno",
                    vmax: float | None = None) -> Image.Image:
    """Blend an (h, w) cell map onto `image` (original size): each cell covers its own rectangle.

    Values are scaled to [0, vmax] (default: the map's maximum), so the hottest cell is the
    colormap's top colour; `alpha` is the heat map's opacity.
    """
    from matplotlib import colormaps

    base = as_pil(image)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"expected an (h, w) map, got shape {w.shape}")
    top = float(vmax) if vmax is not None else float(w.max())
    scaled = np.clip(w / top, 0.0, 1.0) if top > 0 else np.zeros_like(w)
    pixels = upsample(scaled, base.size)
    heat = (colormaps[cmap](pixels)[..., :3] * 255).astype(np.float64)
    mixed = (1 - alpha) * np.asarray(base, dtype=np.float64) + alpha * heat
    return Image.fromarray(mixed.round().astype(np.uint8))


def add_colorbar(fig, axes, vmax: float, cmap: str = "inferno") -> None:
    """A colour bar for heat maps drawn by `overlay_heatmap(..., vmax=vmax)`: 0 to vmax attention weight."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    bar = fig.colorbar(ScalarMappable(norm=Normalize(0.0, vmax if vmax > 0 else 1.0), cmap=cmap), ax=axes,
                       shrink=0.8, pad=0.02)
    bar.set_label("attention weight per visual token", fontsize=7)
    bar.ax.tick_params(labelsize=6)


def plot_image_attention(image, result: AttentionResult, per_token: bool = True, max_tokens: int = 6,
                         title: str | None = None):
    """Figure: the image, the mean attention map of the chosen tokens, then one map per token."""
    maps = [m for m in result.maps if m.kind == "image"]
    if not maps:
        raise ValueError("the sample has no image attention map")
    panels = [("image", as_pil(image), None), (f"mean over {len(result.tokens)} tokens", None, maps[0])]
    if per_token:
        for tok, tmaps in list(zip(result.tokens, result.per_token))[:max_tokens]:
            panels.append((f"token {tok!r}", None, [m for m in tmaps if m.kind == "image"][0]))
    ncols = min(len(panels), 4)
    nrows = -(-len(panels) // ncols)
    fig, axes = new_figure(nrows, ncols, panel=2.6)
    flat = [a for row in axes for a in row]
    base = as_pil(image)
    vmax = max(float(mmap.weights[0].max()) for _, _, mmap in panels if mmap is not None)  # one scale: comparable panels
    for ax, (name, pil, mmap) in zip(flat, panels):
        if mmap is None:
            ax.imshow(pil)
        else:
            ax.imshow(overlay_heatmap(base, mmap.weights[0], vmax=vmax))
            name += f"\nshare on image {mmap.weights.sum():.2f}"
        ax.set_title(name, fontsize=8)
    for ax in flat:
        ax.axis("off")
    add_colorbar(fig, flat, vmax)
    fig.suptitle(title or f"attention to the image (grid {maps[0].weights.shape[1]}x{maps[0].weights.shape[2]} tokens)",
                 fontsize=10)
    return fig


def plot_video_attention(frames: Sequence, video_map: MediaMap, temporal_patch_size: int = 2, title: str | None = None):
    """Figure: one heat map per temporal patch on its first frame, and the mass per patch over time.

    The colour scale is shared across time, so brighter means more attention than other moments.
    """
    frames = [as_pil(f) for f in frames]
    t = video_map.weights.shape[0]
    fig, axes = new_figure(2, t, panel=2.2)
    vmax = float(video_map.weights.max())
    for k in range(t):
        first = min(k * temporal_patch_size, len(frames) - 1)
        last = min(first + temporal_patch_size - 1, len(frames) - 1)
        ax = axes[0][k]
        ax.imshow(overlay_heatmap(frames[first], video_map.weights[k], vmax=vmax))
        ax.set_title(f"frames {first}-{last}", fontsize=8)
        ax.axis("off")
    add_colorbar(fig, list(axes[0]), vmax)
    gs = axes[1][0].get_gridspec()
    for ax in axes[1]:
        ax.remove()
    ax = fig.add_subplot(gs[1, :])
    mass = temporal_profile(video_map)
    ax.bar(range(t), mass, color="#d95f02")
    ax.set_xticks(range(t), [f"{k * temporal_patch_size}-{k * temporal_patch_size + temporal_patch_size - 1}" for k in range(t)])
    ax.set_xlabel("frames (one temporal patch)")
    ax.set_ylabel("attention mass")
    fig.suptitle(title or "attention over time", fontsize=10)
    return fig
