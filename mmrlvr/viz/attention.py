"""Where the policy looks: attention of completion tokens to the visual tokens, on the image grid.

Qwen2-VL-family processors cut an image resized to (H', W') into 14x14 patches (`patch_size`),
then merge 2x2 neighbouring patches (`merge_size`) into one visual token, so an image is
`grid_t x (grid_h / 2) x (grid_w / 2)` tokens in raster order; a video adds time, one temporal
patch per `temporal_patch_size` (2) frames. This module turns one attention row over the sequence
into one `(t, h, w)` map per image or video in that order, and maps a map cell back to pixels of
the original image with the same resize mapping the `iou` verifier uses (`to_image_frame`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from mmrlvr.models.wrapping import unwrap
from mmrlvr.verifiers.grounding import to_image_frame


@dataclass
class MediaMap:
    """Attention over one image or video, on its merged token grid."""

    kind: str  # "image" or "video"
    index: int  # the n-th image (or video) of the sample
    grid_thw: tuple[int, int, int]  # the processor's patch grid (t, h, w), before merging
    weights: np.ndarray  # (t, h // merge, w // merge) attention mass per visual token
    patch_size: int = 14  # pixels per patch side

    @property
    def input_size(self) -> tuple[int, int]:
        """(width, height) of the resized image the model saw, in pixels."""
        return self.grid_thw[2] * self.patch_size, self.grid_thw[1] * self.patch_size


@dataclass
class AttentionResult:
    """What `token_attention` measured for the chosen completion tokens."""

    tokens: list[str]  # the chosen completion tokens, decoded one by one
    maps: list[MediaMap]  # one per image and video of the sample, in prompt order
    visual_share: float  # share of the chosen tokens' attention that lands on visual tokens
    per_token: list[list[MediaMap]] = field(default_factory=list)  # the same maps for each token


def merged_grid(grid_thw: Sequence[int], merge_size: int = 2) -> tuple[int, int, int]:
    """(t, h, w) patch grid -> (t, h / merge, w / merge) token grid; raises if not divisible."""
    t, h, w = (int(x) for x in grid_thw)
    if h % merge_size or w % merge_size:
        raise ValueError(f"grid {t}x{h}x{w} is not divisible by merge size {merge_size}")
    return t, h // merge_size, w // merge_size


def split_visual_attention(
    attn_row: torch.Tensor,
    input_ids: torch.Tensor,
    image_token_id: int | None,
    video_token_id: int | None,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    merge_size: int = 2,
    patch_size: int = 14,
) -> list[MediaMap]:
    """One attention row over a sequence (L,) -> a `MediaMap` per image and video, in order.

    The visual tokens of a kind appear in the sequence in media order, each medium's tokens in
    raster order of its merged grid (time, then rows, then columns), which is how the processor
    flattens patches; so the k-th block of `t*h*w` positions of `<|image_pad|>` is image k.
    """
    maps: list[MediaMap] = []
    for kind, token_id, grids in (("image", image_token_id, image_grid_thw), ("video", video_token_id, video_grid_thw)):
        if grids is None or token_id is None or len(grids) == 0:
            continue
        positions = (input_ids == token_id).nonzero().flatten()
        shapes = [merged_grid(g.tolist(), merge_size) for g in grids]
        need = sum(int(np.prod(s)) for s in shapes)
        if need != len(positions):
            raise ValueError(f"{len(positions)} {kind} tokens in the sequence but the grids need {need}")
        start = 0
        for k, (g, shape) in enumerate(zip(grids, shapes)):
            n = int(np.prod(shape))
            block = attn_row[positions[start : start + n]].detach().float().cpu().numpy()
            maps.append(MediaMap(kind, k, tuple(int(x) for x in g.tolist()), block.reshape(shape), patch_size))
            start += n
    return maps


def cell_box(row: int, col: int, grid_hw: tuple[int, int], image_size: tuple[int, int],
             input_size: tuple[int, int]) -> list[float]:
    """Pixel box [x1, y1, x2, y2] in the original image of merged-grid cell (row, col).

    `grid_hw` is the merged grid, `input_size` the (width, height) the model saw, `image_size`
    the original (width, height); the mapping is the `iou` verifier's `absolute` + `input_size`.
    """
    gh, gw = grid_hw
    iw, ih = input_size
    box = [col * iw / gw, row * ih / gh, (col + 1) * iw / gw, (row + 1) * ih / gh]
    return to_image_frame(box, {"box_format": "absolute", "image_size": tuple(image_size), "input_size": (iw, ih)})


def upsample(weights: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """(h, w) cell map -> (H, W) pixel map of the original image, each pixel its cell's value.

    Pixel (x, y) lies in cell (floor(y * h / H), floor(x * w / W)): the processor's resize is a
    plain stretch of the whole image, so cells tile the original image in equal rectangles.
    """
    h, w = weights.shape
    width, height = image_size
    rows = np.minimum((np.arange(height) * h) // height, h - 1)
    cols = np.minimum((np.arange(width) * w) // width, w - 1)
    return weights[rows][:, cols]


def _eager(model):
    """The model itself, switched to eager attention (sdpa and flash kernels return no weights)."""
    inner = unwrap(model)
    before = inner.config._attn_implementation
    if before != "eager":
        inner.set_attn_implementation("eager")
    return inner, before


def token_attention(
    model,
    processor,
    sample,
    completion: str | Sequence[int],
    tokens: slice | Sequence[int] | None = None,
    layers: Sequence[int] | None = None,
) -> AttentionResult:
    """Attention of chosen completion tokens to the sample's visual tokens.

    For completion token k the row read is the position that *predicts* it (prompt length + k - 1):
    what the model looked at when it chose that token. Rows are averaged over heads and the given
    decoder `layers` (default: all), then over the chosen `tokens` (default: all completion
    tokens). Runs one forward with eager attention (memory grows with layers x heads x length^2:
    on real models pick a few layers and keep sequences short) and restores the previous kernel.
    """
    from mmrlvr.data.collate import encode_prompts, join_prompt_completion

    tok = processor.tokenizer
    ids = tok(completion, add_special_tokens=False)["input_ids"] if isinstance(completion, str) else list(completion)
    if not ids:
        raise ValueError("empty completion: there is no token to read attention for")
    chosen = list(range(len(ids))[tokens]) if isinstance(tokens, slice) else list(tokens if tokens is not None else range(len(ids)))
    if not chosen or not all(0 <= k < len(ids) for k in chosen):
        raise ValueError(f"tokens {tokens!r} do not select completion tokens 0..{len(ids) - 1}")
    prompt = encode_prompts(processor, [sample])
    comp = torch.tensor([ids])
    inner, before = _eager(model)
    try:
        kw = join_prompt_completion(prompt, comp, torch.ones_like(comp), next(inner.parameters()).device)
        with torch.no_grad():
            out = inner(**kw, output_attentions=True, use_cache=False, logits_to_keep=1)
    finally:
        if before != "eager":
            inner.set_attn_implementation(before)
    p = prompt["input_ids"].shape[1]
    sel = list(range(len(out.attentions))) if layers is None else list(layers)
    attn = torch.stack([out.attentions[i][0].float() for i in sel]).mean(dim=(0, 1))  # (L, L)
    rows = attn[[p + k - 1 for k in chosen]]  # (K, L)
    cfg = inner.config
    merge = getattr(processor.image_processor, "merge_size", 2)
    patch = getattr(processor.image_processor, "patch_size", 14)

    def maps_of(row: torch.Tensor) -> list[MediaMap]:
        return split_visual_attention(
            row, kw["input_ids"][0].cpu(), getattr(cfg, "image_token_id", None), getattr(cfg, "video_token_id", None),
            prompt.get("image_grid_thw"), prompt.get("video_grid_thw"), merge, patch,
        )

    per_token = [maps_of(r) for r in rows]
    mean_maps = maps_of(rows.mean(0))
    total = sum(float(m.weights.sum()) for m in mean_maps)
    return AttentionResult([tok.decode([ids[k]]) for k in chosen], mean_maps, total, per_token)


def temporal_profile(video_map: MediaMap) -> np.ndarray:
    """(t,) attention mass per temporal patch of a video map (each patch spans 2 frames)."""
    return video_map.weights.reshape(video_map.weights.shape[0], -1).sum(axis=1)


def answer_tokens(tokenizer, token_ids: Sequence[int], open_tag: str = "<answer>", close_tag: str = "</answer>") -> list[int]:
    """Indices of the completion tokens that write the final answer: those whose characters lie
    between the last `open_tag` and the next `close_tag` (whitespace-only tokens left out);
    [] when there is no `open_tag`. Pass the result as `tokens=` to `token_attention`."""
    pieces = [tokenizer.decode([t]) for t in token_ids]
    text = "".join(pieces)
    start = text.rfind(open_tag)
    if start < 0:
        return []
    start += len(open_tag)
    end = text.find(close_tag, start)
    end = len(text) if end < 0 else end
    out, pos = [], 0
    for k, piece in enumerate(pieces):
        lo, pos = pos, pos + len(piece)
        if pos > start and lo < end and piece.strip():
            out.append(k)
    return out
