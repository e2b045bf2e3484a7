"""Per-family details the RL code needs, chosen by `config.model_type` (never by class name).

What differs between VLM families where RL code breaks silently:
- which tokens must never be sampled (media placeholders and their delimiters),
- the extra per-token inputs every forward must carry (`mm_token_type_ids` for Qwen's mRoPE,
  `token_type_ids` for Gemma 3's bidirectional image attention), extended with zeros over the
  completion,
- how `pixel_values` are laid out (so a batch's rows can be selected with their media),
- which inputs `get_{image,video}_features` takes (so each prompt's media is encoded once per group),
- where LoRA attaches (the language model's projections) and which module is the vision tower,
- the token that ends an assistant turn (warm-start targets end with it).
An unknown `model_type` gets the Qwen2.5-VL adapter (what every model got before families).
Each family's adapter is a field of its record in `mmrlvr.models.family_spec`, read from there.
"""

from __future__ import annotations

import copy
from types import MappingProxyType

from mmrlvr.models.family_spec import (  # noqa: F401  (re-exported: the Adapter type lives with the family records)
    DEFAULT_FAMILY, FAMILY_SPECS, LORA_PROJECTIONS, QWEN_MEDIA_TOKENS, Adapter, family_specs,
)
from mmrlvr.models.wrapping import base_model


def adapters() -> dict[str, Adapter]:
    """model_type -> Adapter of every registered family and alias (`mmrlvr.models.family_spec`), made
    from the records on each call (so a record registered later is in it); also `ADAPTERS`."""
    out = {s.model_type: s.adapter for s in family_specs()}
    for s in family_specs():
        out.update(s.alias_adapters)
    return out


def __getattr__(name: str):
    if name == "ADAPTERS":  # read-only, made on each access: change a family by replacing its record
        return MappingProxyType(adapters())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def adapter_for(model_type: str | None) -> Adapter:
    """The family's adapter; `*_text`/`*_moe` variants share their family's."""
    mt = (model_type or "").removesuffix("_text").removesuffix("_moe")
    spec = FAMILY_SPECS.get(mt)
    if spec is not None:
        return spec.adapter
    for s in family_specs():
        if mt in s.aliases:
            return s.alias_adapters[mt]
    return FAMILY_SPECS[DEFAULT_FAMILY].adapter


def model_adapter(model) -> Adapter:
    """The adapter of a model (DDP and peft wrappers looked through)."""
    return adapter_for(getattr(base_model(model).config, "model_type", None))


def vision_tower(model):
    """The vision tower module of an (unwrapped) model, or None."""
    inner = getattr(model, "model", model)
    return getattr(inner, model_adapter(model).vision_module, None)


def _pick(x, index: list[int]):
    if isinstance(x, (list, tuple)):
        return tuple(x[i] for i in index)
    return x[index]  # a tensor with one entry per media item along dim 0


def features_per_row(encoded, index: list[int]):
    """Encoder output for distinct media -> the same output type with entry `index[k]` at k.

    Carries every per-media field the forward reads (the pooled features; Qwen3-VL's deepstack
    features, one list entry per LM layer they feed)."""
    out = copy.copy(encoded)
    out.pooler_output = _pick(encoded.pooler_output, index)
    deep = getattr(encoded, "deepstack_features", None)
    if deep is not None:
        out.deepstack_features = [_pick(f, index) for f in deep]
    return out


def blackout_patches(x, prob: float, gen, fill=None, patch: int = 14):
    """Images laid out as (..., C, H, W) with each `patch` x `patch` square blacked out with
    probability `prob`: the per-image-layout counterpart of dropping rows of Qwen's flat patches.
    `fill` is the per-channel value of a black pixel (C,), zeros if None."""
    import torch

    *lead, c, h, w = x.shape
    ph, pw = -(-h // patch), -(-w // patch)
    drop = torch.rand((*lead, 1, ph, pw), generator=gen) < prob
    drop = drop.repeat_interleave(patch, -2).repeat_interleave(patch, -1)[..., :h, :w]
    value = torch.zeros(c) if fill is None else fill.to(torch.float)
    return torch.where(drop, value.to(x.dtype).view(c, 1, 1), x)
