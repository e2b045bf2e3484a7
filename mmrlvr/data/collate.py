"""Turn samples into model inputs through the model's own processor and chat template.

Prompts are left padded so that every completion starts at the same column; groups of G
completions share one processed prompt, which is repeated (not re-processed) per completion.
"""

from __future__ import annotations

from typing import Sequence

import torch

from mmrlvr.types import Sample


def prompt_texts(processor, samples: Sequence[Sample]) -> list[str]:
    return [
        processor.apply_chat_template(list(s.messages), add_generation_prompt=True, tokenize=False)
        for s in samples
    ]


def encode_prompts(processor, samples: Sequence[Sample]) -> dict:
    """Processor outputs for a batch of prompts, left padded, with per-sample media counts."""
    images = [im for s in samples for im in s.images]
    videos = [v for s in samples for v in s.videos]
    processor.tokenizer.padding_side = "left"
    kwargs: dict = {"text": prompt_texts(processor, samples), "padding": True, "return_tensors": "pt"}
    if images:
        kwargs["images"] = images
    if videos:
        kwargs["videos"] = videos
    inputs = dict(processor(**kwargs))
    inputs["_n_images"] = [len(s.images) for s in samples]
    inputs["_n_videos"] = [len(s.videos) for s in samples]
    return inputs


def _repeat_media(pixels: torch.Tensor, grid: torch.Tensor, counts: list[int], g: int):
    """Repeat each sample's media rows g times, keeping samples in order."""
    rows = grid.prod(dim=1).tolist()
    pix_chunks = list(torch.split(pixels, rows))
    grid_chunks = list(torch.split(grid, 1))
    out_pix, out_grid, i = [], [], 0
    for c in counts:
        for _ in range(g):
            out_pix.extend(pix_chunks[i : i + c])
            out_grid.extend(grid_chunks[i : i + c])
        i += c
    return torch.cat(out_pix), torch.cat(out_grid)


def repeat_prompts(inputs: dict, g: int) -> dict:
    """(B, ...) prompt inputs -> (B*G, ...), each prompt repeated g times contiguously."""
    if g == 1:
        return inputs
    out = {}
    for key, value in inputs.items():
        if key in ("input_ids", "attention_mask", "mm_token_type_ids"):
            out[key] = value.repeat_interleave(g, dim=0)
    for kind, counts in (("image", inputs["_n_images"]), ("video", inputs["_n_videos"])):
        pix, grid = f"pixel_values{'_videos' if kind == 'video' else ''}", f"{kind}_grid_thw"
        if pix in inputs:
            out[pix], out[grid] = _repeat_media(inputs[pix], inputs[grid], counts, g)
    for extra in ("second_per_grid_ts",):
        if extra in inputs:
            out[extra] = torch.as_tensor(inputs[extra]).repeat_interleave(g, dim=0)
    out["_n_images"] = [c for c in inputs["_n_images"] for _ in range(g)]
    out["_n_videos"] = [c for c in inputs["_n_videos"] for _ in range(g)]
    # which prompt each row repeats: lets a forward encode each prompt's media once per group
    out["_base"] = inputs.get("_base", inputs)
    base_rows = inputs.get("_row_prompt", list(range(len(inputs["_n_images"]))))
    out["_row_prompt"] = [r for r in base_rows for _ in range(g)]
    return out


def select_rows(inputs: dict, rows: list[int]) -> dict:
    """Keep the given sequences (and their media) of a batch of prompt inputs."""
    out = {k: inputs[k][rows] for k in ("input_ids", "attention_mask", "mm_token_type_ids") if k in inputs}
    for kind, counts in (("image", inputs["_n_images"]), ("video", inputs["_n_videos"])):
        pix, grid = f"pixel_values{'_videos' if kind == 'video' else ''}", f"{kind}_grid_thw"
        if pix not in inputs:
            continue
        per_media = list(torch.split(inputs[pix], inputs[grid].prod(dim=1).tolist()))
        starts = [sum(counts[:i]) for i in range(len(counts))]
        keep = [j for r in rows for j in range(starts[r], starts[r] + counts[r])]
        if keep:
            out[pix] = torch.cat([per_media[j] for j in keep])
            out[grid] = inputs[grid][keep]
    if "second_per_grid_ts" in inputs:
        out["second_per_grid_ts"] = torch.as_tensor(inputs["second_per_grid_ts"])[rows]
    out["_n_images"] = [inputs["_n_images"][r] for r in rows]
    out["_n_videos"] = [inputs["_n_videos"][r] for r in rows]
    if "_base" in inputs:
        out["_base"] = inputs["_base"]
        out["_row_prompt"] = [inputs["_row_prompt"][r] for r in rows]
    return out


def model_kwargs(inputs: dict, device: torch.device | str | None = None) -> dict:
    """Drop bookkeeping keys and move tensors to the device."""
    out = {}
    for k, v in inputs.items():
        if k.startswith("_"):
            continue
        out[k] = v.to(device) if (device is not None and isinstance(v, torch.Tensor)) else v
    return out


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lists of token ids -> (N, T) ids and mask, right padded."""
    t = max((len(s) for s in seqs), default=0)
    t = max(t, 1)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask
