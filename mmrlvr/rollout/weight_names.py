"""transformers <-> vLLM parameter names for Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3, Idefics3 and
LLaVA-OneVision, in one place.

Weight sync hands vLLM (name, tensor) pairs in the *checkpoint* naming that vLLM's
`model.load_weights` accepts; vLLM then renames them with its `hf_to_vllm_mapper` and packs
q/k/v and gate/up projections into its fused parameters. `checkpoint_name` produces the first
(peft wrappers stripped); `vllm_param_name` reproduces vLLM's renaming and packing, so that the
engine can check at start-up that every policy weight lands on a vLLM parameter (a name that
lands nowhere would otherwise leave vLLM sampling from stale weights), and so that the mapping
has a CPU test. Mirrors vLLM's `vllm/model_executor/models/qwen2_vl.py`, `qwen2_5_vl.py`,
`qwen3_vl.py`, `gemma3_mm.py`, `idefics3.py` and `llava_onevision.py` (`hf_to_vllm_mapper`,
`packed_modules_mapping`, vision `stacked_params_mapping`; SigLIP and Idefics3 vision attention
pack q/k/v into `qkv_proj` in vLLM). Checked against a real vLLM 0.32 on CPU for every family but
gemma3 (which vLLM does not start on the tiny build): `tests/rollout/test_vllm_families.py`.
"""

from __future__ import annotations

import re

from mmrlvr.models.family_spec import FAMILY_SPECS, TEXT_PACKED, VllmNames, family_specs
from mmrlvr.models.wrapping import unwrap
from mmrlvr.rollout.zero3 import gathered_copy, partitioned

# Each family's vLLM names are the `vllm` field of its record (`mmrlvr.models.family_spec.VllmNames`).
_LM_HEADS = ("language_model.lm_head.", "lm_head.")


def families() -> tuple[str, ...]:
    """The families with a vLLM weight mapping: every record with a `vllm` field (also `FAMILIES`)."""
    return tuple(s.model_type for s in family_specs() if s.vllm is not None)


def __getattr__(name: str):
    if name == "FAMILIES":
        return families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _names(model_type: str) -> VllmNames:
    fam = model_type.removesuffix("_text").removesuffix("_moe")
    spec = FAMILY_SPECS.get(fam)
    if spec is None or spec.vllm is None:
        raise ValueError(f"no vLLM weight mapping for model_type {model_type!r}; known: {', '.join(families())}")
    return spec.vllm


def vllm_episodes(model_type: str) -> bool:
    """Whether vLLM runs the family's multi-turn episodes (its record's `vllm.episodes`: one placeholder
    token per image, expanded by vLLM); a model type with no record is taken at its name (Qwen-VL)."""
    spec = FAMILY_SPECS.get(model_type.removesuffix("_text").removesuffix("_moe"))
    if spec is None:
        return model_type.startswith("qwen")
    return spec.vllm is not None and spec.vllm.episodes


def checkpoint_name(name: str) -> str | None:
    """A policy state-dict name -> the checkpoint name vLLM loads; None for adapter-only tensors.

    peft wraps the model as `base_model.model.<name>` and a LoRA layer's frozen weight as
    `<module>.base_layer.weight`; the adapter's own `lora_A/B` tensors are merged into the base
    weights before sync (or served as a LoRA adapter), never loaded as parameters.
    """
    if "lora_" in name or ".original_module." in name or "modules_to_save" in name:
        return None
    name = name.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


def vllm_param_name(name: str, model_type: str, tie_word_embeddings: bool = False) -> tuple[str, object] | None:
    """A checkpoint name -> (vLLM parameter name, shard id or None); None if vLLM skips it."""
    names = _names(model_type)
    for old, new in names.prefixes:
        if name.startswith(old):
            name = new + name[len(old):]
            break
    else:
        raise ValueError(f"parameter {name!r} has no vLLM counterpart for {model_type}")
    if tie_word_embeddings and name.startswith(_LM_HEADS):
        return None  # vLLM ties lm_head to embed_tokens and skips the duplicate
    if name.startswith(names.dropped):
        return None
    language = name.startswith(names.language)
    packed = TEXT_PACKED if language else names.vision_packed
    for pattern, fused, shard in packed:
        if re.search(pattern, name):
            return re.sub(pattern, fused, name), shard
    return name, None


def vllm_checkpoint_name(name: str, model_type: str) -> str:
    """A checkpoint name as vLLM's `load_weights` accepts it: the SigLIP tower's `vision_model.` restored."""
    spec = FAMILY_SPECS.get(model_type.removesuffix("_text"))
    tower = spec.vllm.siglip_tower if spec is not None and spec.vllm is not None else None
    if tower and name.startswith(tower) and not name.startswith(tower + "vision_model."):
        return tower + "vision_model." + name[len(tower):]
    return name


def sync_pairs(model, gather: bool = True) -> list[tuple[str, object]]:
    """(checkpoint name, tensor) for every weight of the policy, LoRA adapters merged in.

    With peft the adapter is merged for the copy and unmerged afterwards, as TRL and verl do,
    so vLLM samples from base + adapter exactly as the learner's forward computes it.
    `gather=False` leaves FSDP2 shards (DTensors) sharded and ZeRO-3 parameters partitioned (the
    Parameter itself, whose placeholder `detach` would lose): the weight channel's `send` gathers
    them one bucket at a time, so no rank holds the whole unsharded model at once. `gather=True`
    gathers a ZeRO-3 parameter one at a time into a copy (every rank calls sync, in the same order).
    """
    inner = unwrap(model)
    model_type = getattr(getattr(inner, "config", None), "model_type", "")
    merged = hasattr(inner, "merge_adapter")
    if merged:
        inner.merge_adapter()
    try:
        pairs = []
        for name, tensor in inner.state_dict(keep_vars=True).items():
            ck = checkpoint_name(name)
            if ck is None:
                continue
            if partitioned(tensor):  # ZeRO-3: a placeholder outside its gather
                tensor = gathered_copy(tensor) if gather else tensor
            elif gather and hasattr(tensor, "full_tensor"):  # FSDP2 shard: gather (every rank calls sync)
                tensor = tensor.full_tensor().detach()
            else:
                tensor = tensor.detach().clone() if merged else tensor.detach()
            pairs.append((vllm_checkpoint_name(ck, model_type), tensor))
        return pairs
    finally:
        if merged:
            inner.unmerge_adapter()
