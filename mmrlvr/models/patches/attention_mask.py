"""One additive attention mask per learner forward, shared by every layer, instead of one per layer.

transformers builds one boolean (n, 1, q, kv) mask per forward and hands the same tensor to every
attention layer. `torch.nn.functional.scaled_dot_product_attention` cannot use a boolean mask as
it is: in every call it makes an additive copy of the query's dtype, 0 where a key is attended and
-inf where not (aten's `convert_boolean_attn_mask`: `zeros_like` then `masked_fill_(~mask, -inf)`),
and its backward keeps that copy. So a forward with gradients holds L such copies for L layers:
in the tiny model's chain-of-thought update 4 x 5.9 MB of the 304 MB autograd keeps; at 28 layers
and 8 rows of 1,024 completion tokens after a 1,500-token prompt, 28 x 41 MB in bf16.

`masks_once` converts the mask the layers receive once, with the same two ops, and passes the
additive tensor to every layer's attention: SDPA then uses it as it is, every layer keeps the same
tensor, and the numbers are bit for bit the ones of the boolean mask (tests, in every family).
Its rows are padded (`ALIGN`) so that CUDA's memory-efficient kernel takes it without a copy.
Which modules (`why_not_shared`): the language model's attention of the known families, running
`sdpa`. It steps aside without gradients (nothing is kept then), under autocast (the query's dtype
is not the hidden states') and under gradient checkpointing (the layers' recomputation in the
backward runs after the hooks are gone).
"""

from __future__ import annotations

import contextlib

import torch

from mmrlvr.models.family_spec import patched_classes
from mmrlvr.models.wrapping import base_model
from mmrlvr.models.patches.swaps import checkpointed, swap_allowed


def __getattr__(name: str):
    """`TEXT_ATTENTIONS`: the language-model attention classes (transformers 5) that pass
    `attention_mask` to SDPA unchanged; the `text_attentions` of every family record
    (`mmrlvr.models.family_spec`), read on each access."""
    if name == "TEXT_ATTENTIONS":
        return patched_classes("text_attentions")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ALIGN = 16
"""Rows of the additive mask start at multiples of this many elements: CUDA's memory-efficient
SDPA copies a mask whose strides are not multiples of 8 into a padded one in every call
(aten/src/ATen/native/transformers/attention.cpp, `preprocess_mask` / `aligned_tensor`), which
would bring one copy per layer back."""


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(..., q, kv) bool -> the same shape in `dtype`: 0 where attended, -inf where masked out;
    the values SDPA makes of a boolean mask in each call. A view whose rows are `ALIGN`-padded."""
    kv = mask.shape[-1]
    rows = torch.zeros((*mask.shape[:-1], -(-kv // ALIGN) * ALIGN), dtype=dtype, device=mask.device)
    return rows[..., :kv].masked_fill_(mask.logical_not(), float("-inf"))


def why_not_shared(attention: torch.nn.Module) -> str | None:
    """Why this module's mask is left to SDPA, else None."""
    if type(attention).__name__ not in patched_classes("text_attentions"):
        return "not a language-model attention of a known family"
    if getattr(getattr(attention, "config", None), "_attn_implementation", None) != "sdpa":
        return "the attention implementation is not sdpa"
    return None


def eligible_attentions(model) -> list[torch.nn.Module]:
    """The attention modules whose mask `masks_once` converts once per forward."""
    inner = base_model(model)
    if checkpointed(inner):
        return []  # the recomputed layers would convert their own copy in the backward: nothing kept less
    return [m for m in inner.modules() if why_not_shared(m) is None]


@contextlib.contextmanager
def masks_once(model, enabled: bool = True):
    """Within: each boolean 4-D mask the eligible attention layers receive is made additive once and
    that one tensor goes to all of them. Yields the number of layers hooked."""
    on = swap_allowed(model, enabled)
    layers = eligible_attentions(model) if on else []
    made: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}  # holds each boolean mask: ids stay unique

    def convert(module, args, kwargs):
        mask = kwargs.get("attention_mask")
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if not (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.dim() == 4
                and isinstance(hidden, torch.Tensor) and hidden.is_floating_point()):
            return None
        key = (id(mask), hidden.dtype)
        if key not in made:
            made[key] = (mask, additive_mask(mask, hidden.dtype))
        return args, {**kwargs, "attention_mask": made[key][1]}

    handles = [m.register_forward_pre_hook(convert, with_kwargs=True) for m in layers]
    try:
        yield len(layers)
    finally:
        for h in handles:
            h.remove()
        made.clear()
