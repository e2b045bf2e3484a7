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
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

from mmrlvr.models.wrapping import base_model

QWEN_MEDIA_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")
LORA_PROJECTIONS = r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


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


_QWEN = dict(media_tokens=QWEN_MEDIA_TOKENS, layout="grid", batch_state=("rope_deltas",),
             feature_inputs={"image": ("pixel_values", "image_grid_thw"),
                             "video": ("pixel_values_videos", "video_grid_thw")})
_TILE_TAGS = tuple(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))  # Idefics3 image splitting
ADAPTERS = {
    "qwen2_5_vl": Adapter("qwen2_5_vl", **_QWEN),
    "qwen2_vl": Adapter("qwen2_vl", **_QWEN),
    "qwen3_vl": Adapter("qwen3_vl", **_QWEN),  # deepstack features travel with the pooled ones
    "gemma3": Adapter("gemma3", ("<start_of_image>", "<end_of_image>", "<image_soft_token>"), "per_image",
                      {"image": ("pixel_values",)}, token_keys=("token_type_ids",), nested_images=True,
                      vision_module="vision_tower", turn_end="<end_of_turn>"),
    "idefics3": Adapter("idefics3", ("<fake_token_around_image>", "<image>", "<global-img>", *_TILE_TAGS), "per_row",
                        {"image": ("pixel_values", "pixel_attention_mask")}, token_keys=(), nested_images=True,
                        vision_module="vision_model", language_module="text_model", turn_end="<end_of_utterance>"),
    "llava_onevision": Adapter("llava_onevision", ("<image>", "<video>"), "per_image",
                               {"image": ("pixel_values", "image_sizes"), "video": ("pixel_values_videos",)}, token_keys=(),
                               per_image_keys=("image_sizes",), vision_module="vision_tower"),
}
ADAPTERS["smolvlm"] = dataclasses.replace(ADAPTERS["idefics3"], model_type="smolvlm")  # Idefics3's layout


def adapter_for(model_type: str | None) -> Adapter:
    """The family's adapter; `*_text`/`*_moe` variants share their family's."""
    mt = (model_type or "").removesuffix("_text").removesuffix("_moe")
    return ADAPTERS.get(mt) or ADAPTERS["qwen2_5_vl"]


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
