"""A model's sizes from its config alone: the model is built on the meta device, nothing is downloaded.

`model.path` resolves to a config.json: a local model directory's own, the one this package ships
for a hub name it knows (`mmrlvr/models/configs/<name>.json`: Qwen2-VL, Qwen2.5-VL and Qwen3-VL
checkpoints, written from their published configs and checked against their published parameter
counts), or the embedded tiny model's. Parameters are counted on the meta-device model (no
memory), so the counts are the real model's, tied embeddings counted once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mmrlvr.config import ConfigError
from mmrlvr.models.config_checks import read_json_object, read_model_config

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "configs"


@dataclass(frozen=True)
class ModelShape:
    """What the memory plan reads from a model (counts in parameters, sizes in elements)."""

    name: str
    model_type: str
    params: int  # all parameters (tied embeddings once)
    vision_params: int  # the vision tower and its merger / projector
    layers: int  # language-model decoder layers
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    largest_layer: int  # parameters of the largest decoder layer / vision block (an FSDP / ZeRO-3 gather unit)
    largest_matrix: int  # elements of the largest weight matrix besides the embeddings (one weight gradient)
    lora_in_out: int  # sum of (in + out) features over the layers LoRA wraps: a rank-r adapter is r x this
    vision_depth: int = 0
    vision_hidden: int = 0
    vision_intermediate: int = 0
    patch: int = 14  # vision patch side in pixels
    merge: int = 2  # spatial merge: one visual token per merge x merge patches
    temporal_patch: int = 2  # video frames per temporal patch
    processor_max_pixels: int | None = None  # the image processor's own upper bound (its preprocessor_config.json)

    @property
    def pixels_per_token(self) -> int:
        """Image pixels per visual token in the language model (28 x 28 for Qwen2/2.5-VL, 32 x 32 for Qwen3-VL)."""
        return (self.patch * self.merge) ** 2


def config_source(path: str) -> Path:
    """The config.json that describes `model.path`, or a one-line error naming what is known."""
    from mmrlvr.models.families import ensure_family, is_tiny

    if is_tiny(path):
        return ensure_family(path) / "config.json"
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise FileNotFoundError(f"model.path {path}: no config.json in this directory")
        return local / "config.json"
    shipped = SHIPPED / f"{path.rsplit('/', 1)[-1]}.json"
    if shipped.is_file():
        return shipped
    known = ", ".join(sorted(f"Qwen/{p.stem}" for p in SHIPPED.glob("*.json")))
    raise FileNotFoundError(f"model.path {path}: no local directory and no shipped config; known: {known} "
                            "(or point model.path at a local directory holding config.json)")


def processor_max_pixels(config_file: Path) -> int | None:
    """The image processor's pixel bound saved beside a model's config (`size.longest_edge` or `max_pixels`, in
    preprocessor_config.json or processor_config.json's `image_processor`)."""
    raw = {}
    for name, key in (("preprocessor_config.json", None), ("processor_config.json", "image_processor")):
        f = config_file.parent / name
        if f.is_file():
            data = read_json_object(f)
            raw = data.get(key, {}) if key else data
            if raw:
                break
    raw = raw if isinstance(raw, dict) else {}
    size = raw.get("size") if isinstance(raw.get("size"), dict) else {}
    value = size.get("longest_edge") or raw.get("max_pixels")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f}: the image size bound {json.dumps(value)[:40]} is not a positive integer of pixels")
    return value


def _meta_model(config_file: Path):
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    raw = read_model_config(config_file)
    try:
        config = AutoConfig.for_model(raw.pop("model_type"), **raw)
        with torch.device("meta"):
            return AutoModelForImageTextToText.from_config(config)
    except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError, RuntimeError) as exc:
        raise ConfigError(f"model config {config_file}: transformers cannot build it "
                          f"({type(exc).__name__}: {str(exc)[:160]})") from None


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def _largest_block(model) -> int:
    """Parameters of the largest `_no_split_modules` block (what FSDP2 / ZeRO-3 gather at once)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    sizes = [_count(m) for m in model.modules() if type(m).__name__ in names]
    return max(sizes, default=0)


def _largest_matrix(model) -> int:
    return max((p.numel() for n, p in model.named_parameters()
                if p.dim() == 2 and "embed" not in n and "lm_head" not in n), default=0)


def _lora_in_out(model, target: str) -> int:
    import torch

    return sum(m.in_features + m.out_features for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and re.fullmatch(target, name))


def model_shape(path: str) -> ModelShape:
    """The sizes of `model.path`'s model, from its config on the meta device."""
    from mmrlvr.models.adapters import adapter_for, vision_tower

    source = config_source(path)
    model = _meta_model(source)
    text = model.config.get_text_config()
    vision = getattr(model.config, "vision_config", None)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    v = {}
    if vision is not None:
        v = dict(vision_depth=getattr(vision, "depth", 0) or getattr(vision, "num_hidden_layers", 0),
                 vision_hidden=getattr(vision, "embed_dim", None) or vision.hidden_size,
                 vision_intermediate=getattr(vision, "intermediate_size", None)
                 or int(getattr(vision, "mlp_ratio", 4) * (getattr(vision, "embed_dim", None) or vision.hidden_size)),
                 patch=getattr(vision, "patch_size", 14), merge=getattr(vision, "spatial_merge_size", 2),
                 temporal_patch=getattr(vision, "temporal_patch_size", 2))
    adapter = adapter_for(model.config.model_type)
    return ModelShape(
        name=path, model_type=model.config.model_type, params=_count(model),
        vision_params=_count(vision_tower(model)), layers=text.num_hidden_layers, hidden=text.hidden_size,
        heads=heads, kv_heads=getattr(text, "num_key_value_heads", None) or heads, head_dim=head_dim,
        intermediate=text.intermediate_size, vocab=text.vocab_size, largest_layer=_largest_block(model),
        largest_matrix=_largest_matrix(model),
        lora_in_out=_lora_in_out(model, adapter.lora_target), processor_max_pixels=processor_max_pixels(source), **v,
    )
