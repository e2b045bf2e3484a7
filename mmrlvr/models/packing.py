"""Padding-free forwards: a micro-batch's joined rows as one sequence of their real tokens.

A padded forward computes the (N, P + T) rectangle of left-padded prompts and right-padded
completions; with completion lengths spread out most of it can be padding. Packed, the rows' real
tokens are concatenated into one (1, K) sequence and the attention is kept inside each row by the
block-diagonal causal mask transformers builds when no 2-D mask is given and the position ids
restart (`transformers.masking_utils.find_packed_sequence_indices`).

For the Qwen VL families the rotary positions are 3-D (mRoPE): each row's are computed exactly as
the padded forward computes them (the model's `get_rope_index` over the padded rows, which already
numbers each row's real tokens from 0), then packed; the model takes them with a first row of 1-D
text positions (cumulative per row), the one its mask builder reads to find the rows. Media
(pixel values or encoded features, grids) go in unchanged: the rows keep their order.

Only what has been checked against the padded forward packs (`why_not_packed`): other families
(Gemma 3's bidirectional image attention, Idefics3 and LLaVA-OneVision's 1-D positions are
unchecked) and flash-attention are refused in one line, never run with attention across rows.
"""

from __future__ import annotations

import torch

from mmrlvr.models.family_spec import family_specs
from mmrlvr.models.wrapping import base_model

PACKED_FAMILIES = tuple(s.model_type for s in family_specs() if s.packs_rows)
"""Families whose packed forward is tested equal to the padded one (log-probs and gradients): those whose
record says `packs_rows` (`mmrlvr.models.family_spec`), so a family's table stays in its record."""
PACKED_ATTENTION = ("sdpa", "eager")
"""Attention implementations whose block-diagonal mask from restarting positions is tested."""
_PER_TOKEN = ("mm_token_type_ids", "token_type_ids")
_ROPE_INPUTS = ("mm_token_type_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts")


def why_not_packed(model_type: str | None, attention: str | None = "sdpa") -> str | None:
    """None when a model of `model_type` with `attention` packs rows correctly; else why not."""
    family = (model_type or "").removesuffix("_text").removesuffix("_moe")
    if family not in PACKED_FAMILIES:
        return f"the {model_type} family is not checked for packed rows (packed: {', '.join(PACKED_FAMILIES)})"
    if attention is not None and attention not in PACKED_ATTENTION:
        return f"attention {attention} is not checked for packed rows (packed: {', '.join(PACKED_ATTENTION)})"
    return None


def model_why_not_packed(model) -> str | None:
    """`why_not_packed` of a loaded model (wrappers looked through)."""
    config = base_model(model).config
    return why_not_packed(getattr(config, "model_type", None), getattr(config, "_attn_implementation", None))


def is_prefix_mask(mask: torch.Tensor) -> bool:
    """Each row's ones come first (right padding only): the completions a packed forward takes."""
    return bool((mask[:, 1:] <= mask[:, :-1]).all()) if mask.shape[1] > 1 else True


def padded_positions(model, kw: dict) -> torch.Tensor:
    """(4, N, L) positions of the joined rows as the padded forward uses them: 1-D text positions
    (0 at each row's first real token), then the 3-D rotary ones of `get_rope_index`."""
    extra = {k: kw[k] for k in _ROPE_INPUTS if k in kw}
    return base_model(model)._prepare_position_ids_for_generation(
        kw["input_ids"], {"attention_mask": kw["attention_mask"], **extra})


def pack_joined(model, kw: dict) -> tuple[dict, torch.Tensor]:
    """Joined (N, L) inputs (left-padded prompts + right-padded completions) -> the (1, K) packed
    inputs (no attention mask: the positions mark the rows) and the (N, L) index of each position
    in the packed sequence (-1 on padding)."""
    mask = kw["attention_mask"].bool()
    keep = mask.flatten()  # row-major: row 0's real tokens, then row 1's, ...
    positions = padded_positions(model, kw)
    packed = {k: v for k, v in kw.items() if k not in ("input_ids", "attention_mask", *_PER_TOKEN)}
    packed["input_ids"] = kw["input_ids"].flatten()[keep][None]
    for key in _PER_TOKEN:
        if key in kw:
            packed[key] = kw[key].flatten()[keep][None]
    packed["position_ids"] = positions.flatten(1)[:, keep][:, None]
    index = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
    index[mask] = torch.arange(int(keep.sum()), device=mask.device)
    return packed, index


def kept_positions(index: torch.Tensor, start: int, t: int) -> torch.Tensor:
    """(N * t,) packed positions whose outputs predict the t completion tokens (the padded columns
    start - 1 ... start + t - 2); a padded column takes its row's last real position (a value the
    completion mask hides, as the padded forward's is)."""
    want = index[:, start - 1:start - 1 + t]
    last = index.max(dim=1).values
    return torch.where(want >= 0, want, last[:, None]).flatten()
