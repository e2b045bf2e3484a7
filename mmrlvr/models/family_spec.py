"""One record per supported VLM family, in one registry: every per-family table reads from here.

A `FamilySpec` holds what the rest of the code needs to know about a family, keyed by its
`config.model_type`:
- `adapter`: the RL details (`mmrlvr.models.adapters`: media tokens never sampled, pixel layout,
  encoder inputs, LoRA targets, vision tower, end of turn, shared prefill, batch state);
- `tiny_builder`: its embedded tiny random model (`tiny:<model_type>`, `mmrlvr.models.families`);
- `vllm`: its transformers -> vLLM weight names (`mmrlvr.rollout.weight_names`) and whether vLLM
  runs its multi-turn episodes (`mmrlvr.rollout.vllm`);
- `box_format`: the coordinates it answers boxes in (`mmrlvr.verifiers.grounding`);
- `text_attentions`, `gated_mlps`, `rms_norms`: the module classes the memory patches of
  `mmrlvr.models.patches` apply to (by class name);
- `aliases`: other model types that take its adapter and box convention (SmolVLM is Idefics3).

Adding a family is one `register_family(FamilySpec(...))` below (plus its tiny builder in
`mmrlvr/models/families/<family>.py`); `tests/models/test_family_spec.py` checks that a record
registered there shows up in every table.

Why here and not in `mmrlvr/models/families/`: that package imports the tiny default builder
(`mmrlvr.models.tiny`, which imports torch), and the grounding verifier reads the box convention
from this record in verifier workers that never import torch. This module imports nothing of the
project, so every layer from `models` up (verifiers, tasks, rollout: `tests/test_layers.py`) may
read it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterator

QWEN_MEDIA_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
LORA_PROJECTIONS = r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
DEFAULT_FAMILY = "qwen2_5_vl"  # plain `tiny`, and the adapter / box convention of an unknown model type
BOX_FORMATS = ("absolute", "norm1000", "norm1")


@dataclass(frozen=True)
class Adapter:
    model_type: str
    media_tokens: tuple[str, ...]  # never sampled: feeding one back breaks the media bookkeeping
    layout: str  # "grid": flat patches split by *_grid_thw; "per_image": dim 0 = image; "per_row": dim 0 = row
    feature_inputs: dict = field(default_factory=dict)  # modality -> inputs of get_<modality>_features
    token_keys: tuple[str, ...] = ("mm_token_type_ids",)  # per-token inputs, zero over completions
    per_image_keys: tuple[str, ...] = ()  # besides pixel_values: one row per image (per_image layout)
    nested_images: bool = False  # the processor wants images as one list per prompt
    vision_module: str = "visual"  # attribute of `model.model` holding the vision tower (+ projector)
    language_module: str = "language_model"  # LoRA targets projections under this module only
    turn_end: str = "<|im_end|>"  # ends an assistant turn: teacher targets end with it, sampling stops at it
    shared_prefill: bool = True  # each prompt's forward once per group in HF rollouts (rollout/prefill.py)
    batch_state: tuple[str, ...] = ()  # attributes of `model.model` holding per-row state a prefill sets

    @property
    def lora_target(self) -> str:
        return rf".*{self.language_module}\..*\.{LORA_PROJECTIONS}"

    def media_token_ids(self, tokenizer) -> list[int]:
        vocab = tokenizer.get_vocab()
        return sorted(vocab[t] for t in self.media_tokens if t in vocab)


@dataclass(frozen=True)
class VllmNames:
    """How vLLM names the family's weights (mirrors its `hf_to_vllm_mapper`, `packed_modules_mapping`
    and vision `stacked_params_mapping`; `mmrlvr.rollout.weight_names`)."""

    prefixes: tuple[tuple[str, str], ...]  # checkpoint prefix -> vLLM prefix; the first match wins
    vision_packed: tuple[tuple[str, str, object], ...]  # vision (regex, fused module, shard id); text: TEXT_PACKED
    language: tuple[str, ...] = ("language_model.",)  # vLLM names of the language model (packed as text)
    dropped: tuple[str, ...] = ()  # vLLM names it never builds (their weights are skipped)
    siglip_tower: str | None = None  # checkpoint prefix of a SigLIP tower whose `vision_model.` level vLLM keeps
    episodes: bool = False  # multi-turn episodes on vLLM (one placeholder token per image, expanded by vLLM)


@dataclass(frozen=True)
class FamilySpec:
    model_type: str
    adapter: Adapter  # its `model_type` is this record's
    box_format: str  # "absolute" | "norm1000" | "norm1" (mmrlvr.verifiers.grounding)
    tiny_builder: str | None = None  # "module:function(seed=) -> (model, processor)"; None: no tiny build
    vllm: VllmNames | None = None  # None: no vLLM weight mapping (rollout.engine=hf only)
    text_attentions: tuple[str, ...] = ()  # language-model attention classes (patches.attention_mask)
    gated_mlps: tuple[str, ...] = ()  # gated MLP classes recomputed in the backward (patches.gated_mlp)
    rms_norms: tuple[str, ...] = ()  # RMSNorm classes swapped for the fused one (patches.rms_norm)
    aliases: tuple[str, ...] = ()  # model types that share its adapter and box convention
    packs_rows: bool = False  # its packed forward is tested equal to the padded one (train.padding_free)

    def __post_init__(self):
        if self.adapter.model_type != self.model_type:
            raise ValueError(f"family {self.model_type!r}: its adapter is {self.adapter.model_type!r}'s")
        if self.box_format not in BOX_FORMATS:
            raise ValueError(f"family {self.model_type!r}: box_format {self.box_format!r} is none of {BOX_FORMATS}")

    @cached_property
    def alias_adapters(self) -> dict[str, Adapter]:
        """Each alias's adapter: this family's under the alias's model type (made once)."""
        return {a: dataclasses.replace(self.adapter, model_type=a) for a in self.aliases}

    def builder(self) -> Callable:
        """The tiny builder function (imported on first use: the builders import transformers)."""
        if self.tiny_builder is None:
            raise ValueError(f"family {self.model_type!r} has no tiny builder")
        module, name = self.tiny_builder.split(":")
        return getattr(importlib.import_module(module), name)


FAMILY_SPECS: dict[str, FamilySpec] = {}  # model_type -> record, in registration order


def register_family(spec: FamilySpec) -> FamilySpec:
    """Add a family's record; a model type (or alias) already taken is an error."""
    taken = {t for s in FAMILY_SPECS.values() for t in (s.model_type, *s.aliases)}
    clash = {spec.model_type, *spec.aliases} & taken
    if clash:
        raise ValueError(f"model type {', '.join(sorted(clash))} already has a family record")
    FAMILY_SPECS[spec.model_type] = spec
    return spec


def family_specs() -> Iterator[FamilySpec]:
    return iter(list(FAMILY_SPECS.values()))


def family_spec(model_type: str) -> FamilySpec:
    """The record of a registered family (exact model type); a KeyError naming the known ones."""
    try:
        return FAMILY_SPECS[model_type]
    except KeyError:
        raise KeyError(f"no family record for model_type {model_type!r}; known: {', '.join(FAMILY_SPECS)}") from None


def patched_classes(kind: str) -> tuple[str, ...]:
    """The class names a memory patch applies to, over every record in order, each once:
    kind is "text_attentions", "gated_mlps" or "rms_norms" (a field of FamilySpec)."""
    return tuple(dict.fromkeys(name for s in FAMILY_SPECS.values() for name in getattr(s, kind)))


# ---- the records ---------------------------------------------------------------------------------

# fused parameters in vLLM: (regex on the vLLM name, fused module, shard id)
TEXT_PACKED = (
    (r"\.self_attn\.q_proj\.", ".self_attn.qkv_proj.", "q"),
    (r"\.self_attn\.k_proj\.", ".self_attn.qkv_proj.", "k"),
    (r"\.self_attn\.v_proj\.", ".self_attn.qkv_proj.", "v"),
    (r"\.mlp\.gate_proj\.", ".mlp.gate_up_proj.", 0),
    (r"\.mlp\.up_proj\.", ".mlp.gate_up_proj.", 1),
)
# "model.language_model." / "model.visual." are transformers >= 4.52 names (what transformers 5
# saves); "model." / "visual." are the original Qwen checkpoints' names.
QWEN_PREFIXES = (
    ("model.language_model.", "language_model.model."),
    ("model.visual.", "visual."),
    ("lm_head.", "language_model.lm_head."),
    ("model.", "language_model.model."),
    ("visual.", "visual."),
)
LLAVA_PREFIXES = (  # vLLM's gemma3_mm / llava_onevision mappers
    ("model.language_model.", "language_model.model."),
    ("model.vision_tower.vision_model.", "vision_tower.vision_model."),
    # transformers 5.24 builds the SigLIP tower without its `vision_model` level; vLLM's
    # SiglipVisionModel keeps it (as the released checkpoints do)
    ("model.vision_tower.", "vision_tower.vision_model."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
    ("model.image_newline", "image_newline"),
    ("lm_head.", "language_model.lm_head."),
)
SIGLIP_PACKED = TEXT_PACKED[:3]  # SigLIP / Idefics3 vision attention: q/k/v packed into qkv_proj; MLP fc1/fc2 unpacked
# vLLM's SiglipVisionModel keeps the `vision_model` level that transformers 5.x drops; its gemma3_mm
# / llava_onevision mappers only strip `model.`, so a synced tower weight needs the level put back
# (else vLLM 0.32 raises "There is no module or parameter named 'vision_tower.embeddings'")
SIGLIP_TOWER = "model.vision_tower."

_QWEN = dict(media_tokens=QWEN_MEDIA_TOKENS, layout="grid", batch_state=("rope_deltas",),
             feature_inputs={"image": ("pixel_values", "image_grid_thw"),
                             "video": ("pixel_values_videos", "video_grid_thw")})
_TILE_TAGS = tuple(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))  # Idefics3 image splitting

register_family(FamilySpec(
    "qwen2_5_vl", Adapter("qwen2_5_vl", **_QWEN), packs_rows=True, box_format="absolute",  # pixels of the resized image
    tiny_builder="mmrlvr.models.tiny:build_tiny",  # the embedded default (`tiny`), built by mmrlvr.models.tiny
    vllm=VllmNames(QWEN_PREFIXES, vision_packed=((r"\.mlp\.gate_proj\.", ".mlp.gate_up_proj.", 0),
                                                 (r"\.mlp\.up_proj\.", ".mlp.gate_up_proj.", 1)), episodes=True),
    text_attentions=("Qwen2_5_VLAttention",), gated_mlps=("Qwen2MLP",), rms_norms=("Qwen2_5_VLRMSNorm",)))
register_family(FamilySpec(
    "qwen2_vl", Adapter("qwen2_vl", **_QWEN), packs_rows=True, box_format="norm1000",
    tiny_builder="mmrlvr.models.families.qwen:build_qwen2_vl",
    vllm=VllmNames(QWEN_PREFIXES, vision_packed=(), episodes=True),  # vision MLP is fc1/fc2, attention already qkv
    text_attentions=("Qwen2VLAttention",), gated_mlps=("Qwen2MLP",), rms_norms=("Qwen2VLRMSNorm",)))
register_family(FamilySpec(
    "qwen3_vl", Adapter("qwen3_vl", **_QWEN), packs_rows=True, box_format="norm1000",  # deepstack features travel with the pooled ones
    tiny_builder="mmrlvr.models.families.qwen:build_qwen3_vl",
    vllm=VllmNames(QWEN_PREFIXES, vision_packed=(), episodes=True),  # vision MLP is linear_fc1/linear_fc2
    text_attentions=("Qwen3VLTextAttention",), gated_mlps=("Qwen3VLTextMLP",), rms_norms=("Qwen3VLTextRMSNorm",)))
register_family(FamilySpec(
    "gemma3", Adapter("gemma3", ("<start_of_image>", "<end_of_image>", "<image_soft_token>"), "per_image",
                      {"image": ("pixel_values",)}, token_keys=("token_type_ids",), nested_images=True,
                      vision_module="vision_tower", turn_end="<end_of_turn>"),
    box_format="norm1000",  # no box format of its own in its released recipes: asked for 0-1000
    tiny_builder="mmrlvr.models.families.gemma3:build",
    vllm=VllmNames(LLAVA_PREFIXES, vision_packed=SIGLIP_PACKED, siglip_tower=SIGLIP_TOWER),
    # Gemma 3's norm scales by (1 + weight) in float32: not swapped
    text_attentions=("Gemma3Attention",), gated_mlps=("Gemma3MLP",), rms_norms=()))
register_family(FamilySpec(
    "idefics3", Adapter("idefics3", ("<fake_token_around_image>", "<image>", "<global-img>", *_TILE_TAGS), "per_row",
                        {"image": ("pixel_values", "pixel_attention_mask")}, token_keys=(), nested_images=True,
                        vision_module="vision_model", language_module="text_model", turn_end="<end_of_utterance>"),
    box_format="norm1",  # no box format of its own in its released recipes: asked for 0-1
    tiny_builder="mmrlvr.models.families.idefics3:build",
    # vLLM's Idefics3 keeps transformers' layout: model.text_model / vision_model / connector
    vllm=VllmNames((("model.", "model."), ("lm_head.", "lm_head.")), vision_packed=SIGLIP_PACKED,
                   language=("model.text_model.", "lm_head.")),
    text_attentions=("LlamaAttention",), gated_mlps=("LlamaMLP",), rms_norms=("LlamaRMSNorm",),
    aliases=("smolvlm",)))  # SmolVLM is Idefics3's layout
register_family(FamilySpec(
    "llava_onevision", Adapter("llava_onevision", ("<image>", "<video>"), "per_image",
                               {"image": ("pixel_values", "image_sizes"), "video": ("pixel_values_videos",)},
                               token_keys=(), per_image_keys=("image_sizes",), vision_module="vision_tower"),
    box_format="norm1",  # LLaVA's RefCOCO data; OneVision does not pad to a square
    tiny_builder="mmrlvr.models.families.llava_onevision:build",
    # LLaVA-OneVision reads the SigLIP tower's hidden states before its final norm, so vLLM's
    # SiglipVisionModel is made without post_layernorm and drops its weights
    vllm=VllmNames(LLAVA_PREFIXES, vision_packed=SIGLIP_PACKED, siglip_tower=SIGLIP_TOWER,
                   dropped=("vision_tower.vision_model.post_layernorm.",)),
    text_attentions=("Qwen2Attention",), gated_mlps=("Qwen2MLP",), rms_norms=("Qwen2RMSNorm",)))
