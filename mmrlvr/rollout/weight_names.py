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

from mmrlvr.models.wrapping import unwrap

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "idefics3", "llava_onevision")

# checkpoint prefix -> vLLM prefix; the first match wins, so specific prefixes come first.
# "model.language_model." / "model.visual." are transformers >= 4.52 names (what transformers 5
# saves); "model." / "visual." are the original Qwen checkpoints' names.
_QWEN_PREFIXES = (
    ("model.language_model.", "language_model.model."),
    ("model.visual.", "visual."),
    ("lm_head.", "language_model.lm_head."),
    ("model.", "language_model.model."),
    ("visual.", "visual."),
)
_LLAVA_PREFIXES = (  # vLLM's gemma3_mm / llava_onevision mappers
    ("model.language_model.", "language_model.model."),
    ("model.vision_tower.vision_model.", "vision_tower.vision_model."),
    # transformers 5.24 builds the SigLIP tower without its `vision_model` level; vLLM's
    # SiglipVisionModel keeps it (as the released checkpoints do)
    ("model.vision_tower.", "vision_tower.vision_model."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
    ("model.image_newline", "image_newline"),
    ("lm_head.", "language_model.lm_head."),
)
_PREFIXES = {"qwen2_vl": _QWEN_PREFIXES, "qwen2_5_vl": _QWEN_PREFIXES, "qwen3_vl": _QWEN_PREFIXES,
             "gemma3": _LLAVA_PREFIXES, "llava_onevision": _LLAVA_PREFIXES,
             # vLLM's Idefics3 keeps transformers' layout: model.text_model / vision_model / connector
             "idefics3": (("model.", "model."), ("lm_head.", "lm_head."))}
_LANGUAGE = {"idefics3": ("model.text_model.", "lm_head.")}  # else language_model.*
_LM_HEADS = ("language_model.lm_head.", "lm_head.")
# vLLM names it never builds: LLaVA-OneVision reads the SigLIP tower's hidden states before its
# final norm, so vLLM's SiglipVisionModel is made without post_layernorm and drops its weights
_DROPPED = {"llava_onevision": ("vision_tower.vision_model.post_layernorm.",)}

# fused parameters in vLLM: (regex on the vLLM name, fused module, shard id)
_TEXT_PACKED = (
    (r"\.self_attn\.q_proj\.", ".self_attn.qkv_proj.", "q"),
    (r"\.self_attn\.k_proj\.", ".self_attn.qkv_proj.", "k"),
    (r"\.self_attn\.v_proj\.", ".self_attn.qkv_proj.", "v"),
    (r"\.mlp\.gate_proj\.", ".mlp.gate_up_proj.", 0),
    (r"\.mlp\.up_proj\.", ".mlp.gate_up_proj.", 1),
)
_VISION_PACKED = {
    "qwen2_vl": (),  # vision MLP is fc1/fc2, attention already fused as qkv
    "qwen2_5_vl": ((r"\.mlp\.gate_proj\.", ".mlp.gate_up_proj.", 0), (r"\.mlp\.up_proj\.", ".mlp.gate_up_proj.", 1)),
    "qwen3_vl": (),  # vision MLP is linear_fc1/linear_fc2
    # SigLIP / Idefics3 vision attention: q/k/v packed into qkv_proj; MLP fc1/fc2 unpacked
    "gemma3": _TEXT_PACKED[:3], "idefics3": _TEXT_PACKED[:3], "llava_onevision": _TEXT_PACKED[:3],
}


def _family(model_type: str) -> str:
    fam = model_type.removesuffix("_text").removesuffix("_moe")
    if fam not in FAMILIES:
        raise ValueError(f"no vLLM weight mapping for model_type {model_type!r}; known: {', '.join(FAMILIES)}")
    return fam


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
    fam = _family(model_type)
    for old, new in _PREFIXES[fam]:
        if name.startswith(old):
            name = new + name[len(old):]
            break
    else:
        raise ValueError(f"parameter {name!r} has no vLLM counterpart for {model_type}")
    if tie_word_embeddings and name.startswith(_LM_HEADS):
        return None  # vLLM ties lm_head to embed_tokens and skips the duplicate
    if name.startswith(_DROPPED.get(fam, ())):
        return None
    language = name.startswith(_LANGUAGE.get(fam, ("language_model.",)))
    packed = _TEXT_PACKED if language else _VISION_PACKED[fam]
    for pattern, fused, shard in packed:
        if re.search(pattern, name):
            return re.sub(pattern, fused, name), shard
    return name, None


# vLLM's SiglipVisionModel keeps the `vision_model` level that transformers 5.x drops; its gemma3_mm
# / llava_onevision mappers only strip `model.`, so a synced tower weight needs the level put back
# (else vLLM 0.32 raises "There is no module or parameter named 'vision_tower.embeddings'")
_SIGLIP_TOWER = {"gemma3": "model.vision_tower.", "llava_onevision": "model.vision_tower."}


def vllm_checkpoint_name(name: str, model_type: str) -> str:
    """A checkpoint name as vLLM's `load_weights` accepts it: the SigLIP tower's `vision_model.` restored."""
    tower = _SIGLIP_TOWER.get(model_type.removesuffix("_text"))
    if tower and name.startswith(tower) and not name.startswith(tower + "vision_model."):
        return tower + "vision_model." + name[len(tower):]
    return name


def sync_pairs(model) -> list[tuple[str, object]]:
    """(checkpoint name, tensor) for every weight of the policy, LoRA adapters merged in.

    With peft the adapter is merged for the copy and unmerged afterwards, as TRL and verl do,
    so vLLM samples from base + adapter exactly as the learner's forward computes it.
    """
    inner = unwrap(model)
    model_type = getattr(getattr(inner, "config", None), "model_type", "")
    merged = hasattr(inner, "merge_adapter")
    if merged:
        inner.merge_adapter()
    try:
        pairs = []
        for name, tensor in inner.state_dict().items():
            ck = checkpoint_name(name)
            if ck is None:
                continue
            if hasattr(tensor, "full_tensor"):  # FSDP2 shard: gather (every rank calls sync)
                tensor = tensor.full_tensor()
            pairs.append((vllm_checkpoint_name(ck, model_type), tensor.detach().clone() if merged else tensor.detach()))
        return pairs
    finally:
        if merged:
            inner.unmerge_adapter()
