"""Load any image-text-to-text model and its processor: the tiny default and real checkpoints alike."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch

from mmrlvr.config import ConfigError, ModelConfig
from mmrlvr.models.adapters import adapter_for, vision_tower
from mmrlvr.models.families import ensure_family, is_tiny, tiny_model_type
from mmrlvr.models.tiny import TINY_NAME

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(path: str) -> str:
    """"tiny" / "tiny:<model_type>" -> the embedded model's directory (built on first use); a local directory -> its
    absolute path (so a LoRA adapter saved from it names a base that loads from anywhere); a hub
    name unchanged."""
    if is_tiny(path):
        return str(ensure_family(path).resolve())
    local = Path(path).expanduser()
    return str(local.resolve()) if local.is_dir() else path


def checkpoint_path(path: str) -> str:
    """Check a user-given model directory before anything loads: "tiny", a local directory, or a
    hub name (`org/name`); a path that looks local but is missing is an error that says so,
    instead of a hub connection error."""
    if is_tiny(path):
        tiny_model_type(path)  # an unknown family is named here, before anything loads
        return path
    local = Path(path).expanduser()
    if local.is_dir():
        return str(local.resolve())
    looks_local = path.startswith((".", "/", "~")) or path.count("/") != 1 or local.parent.is_dir()
    if looks_local or local.exists():
        raise FileNotFoundError(f"checkpoint {path!r}: no such directory")
    return path


def load_checkpoint(path: str, model_cfg: ModelConfig | None = None):
    """(model, processor) from a full model directory or a LoRA adapter directory (merged into the
    base that its adapter_config.json names), with `model_cfg`'s dtype and pixel limits."""
    import dataclasses

    path = checkpoint_path(path)
    cfg = dataclasses.replace(model_cfg or ModelConfig(), path=path, lora_rank=0, freeze_vision=False,
                              gradient_checkpointing=False)
    adapter = Path(path) / "adapter_config.json"
    if not adapter.is_file():
        return load_policy(cfg)
    import json

    from peft import PeftModel

    base = json.loads(adapter.read_text()).get("base_model_name_or_path") or TINY_NAME
    try:
        base = checkpoint_path(base)
    except FileNotFoundError:
        raise FileNotFoundError(f"{adapter}: base model {base!r}: no such directory") from None
    model, _ = load_policy(dataclasses.replace(cfg, path=base))
    processor = _load_processor(path, cfg, model.config.model_type)  # an adapter directory has no model config
    try:
        return PeftModel.from_pretrained(model, path).merge_and_unload(), processor
    except pickle.UnpicklingError as exc:  # an adapter_model.bin holding code: peft reads it weights-only
        raise ConfigError(refused_pickle(str(path), exc)) from None


def merge_checkpoint(path: str, out: str | Path) -> Path:
    """Write a LoRA checkpoint as one plain model directory (adapter merged into its base)."""
    model, processor = load_checkpoint(path)
    out = Path(out)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _load_processor(path: str, cfg: ModelConfig, model_type: str):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(path)
    if cfg.min_pixels is not None or cfg.max_pixels is not None:
        # the image processor takes both bounds or neither: the one not set keeps its default
        # (`model.max_pixels` alone once broke every image after the model had loaded)
        current = dict(getattr(getattr(processor, "image_processor", None), "size", None) or {})
        size = {"shortest_edge": cfg.min_pixels if cfg.min_pixels is not None else current.get("shortest_edge"),
                "longest_edge": cfg.max_pixels if cfg.max_pixels is not None else current.get("longest_edge")}
        processor = AutoProcessor.from_pretrained(path, size={k: v for k, v in size.items() if v is not None})
    processor.tokenizer.padding_side = "left"
    processor.model_type = model_type  # picks the family's adapter (mmrlvr.models.adapters)
    _set_video_limits(processor, cfg)
    return processor


def refused_pickle(where: str, exc: Exception) -> str:
    """One line for a weights file that holds code (torch's weights-only loader refused it): what it
    tried to call, never the loader's 40-line traceback. Nothing of it ran."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    what = found.group(1) if found else (str(exc).splitlines() or [""])[0][:120]
    return (f"model {where!r}: refused to load its pickled weights (*.bin): they hold code, not only tensors "
            f"({what}); weights are read with weights_only=True, so it never ran")


def pickled_weights_problem(path: str) -> str | None:
    """The refusal line for a local model directory whose `*.bin` weights hold code, else None.

    Read the way transformers reads them (weights-only), with the tensors memory-mapped, so it costs
    the pickle's structure, not the weights: the rollout server asks before vLLM loads the directory
    (whose own refusal is a 138-line traceback). Legacy, unreadable files are left to the loader."""
    local = Path(str(path)).expanduser()
    if not local.is_dir():
        return None
    for file in sorted(local.glob("*.bin")):
        try:
            torch.load(file, weights_only=True, mmap=True, map_location="cpu")
        except pickle.UnpicklingError as exc:
            return refused_pickle(str(path), exc)
        except Exception:  # noqa: BLE001 - not a zip checkpoint, truncated: the loader says what is wrong
            continue
    return None


def load_policy(path_or_cfg: str | Path | ModelConfig = TINY_NAME, master_weights: bool = False):
    """Return (model, processor) through AutoModelForImageTextToText + AutoProcessor.

    The same call loads `Qwen/Qwen2.5-VL-3B-Instruct` on a GPU machine and the embedded tiny model
    here: the only difference is the directory. `master_weights` (training a bf16 model): the
    trainable parameters load in float32, so a checkpoint's float32 master weights come back
    exactly, and the frozen ones (a frozen vision tower) in `model.dtype`; a LoRA base loads in
    `model.dtype` (it is frozen), its adapters in float32 (peft's own upcast). The training loop
    then runs the forward in `model.dtype` (`mmrlvr.train.precision`).
    """
    from transformers import AutoModelForImageTextToText

    cfg = path_or_cfg if isinstance(path_or_cfg, ModelConfig) else ModelConfig(path=str(path_or_cfg))
    if cfg.dtype not in _DTYPES:
        raise ValueError(f"model.dtype {cfg.dtype!r} unknown; known: {', '.join(_DTYPES)}")
    path = resolve_model_path(cfg.path)
    dtype = _DTYPES[cfg.dtype]
    masters = master_weights and dtype != torch.float32 and cfg.lora_rank == 0
    try:
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=torch.float32 if masters else dtype, attn_implementation=cfg.attn_implementation
        )
        processor = _load_processor(path, cfg, model.config.model_type)
    except OSError as exc:  # not cached and no network, a file gone: one line, not the hub client's traceback
        if isinstance(exc, FileNotFoundError) or Path(str(path)).expanduser().exists():
            raise
        raise ConfigError(f"model {cfg.path!r} cannot be loaded ({(str(exc).splitlines() or [''])[0][:200]})") from None
    except pickle.UnpicklingError as exc:  # transformers reads .bin weights with weights_only=True
        raise ConfigError(refused_pickle(cfg.path, exc)) from None
    if cfg.freeze_vision:
        visual = vision_tower(model)
        if visual is not None:
            visual.requires_grad_(False)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora_rank > 0:
        model = _wrap_lora(model, cfg)
    if masters:
        cast_frozen(model, dtype)
    return model, processor


@torch.no_grad()
def cast_frozen(model, dtype: torch.dtype) -> int:
    """Frozen floating parameters -> `dtype` (trainable ones keep theirs); returns how many moved."""
    moved = 0
    for p in model.parameters():
        if not p.requires_grad and p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
            moved += 1
    return moved


def _set_video_limits(processor, cfg: ModelConfig) -> None:
    """Video memory bounds from the config: the video processor's per-frame pixel range, and the
    decode-time caps that `encode_prompts` reads from `processor.video_limits`."""
    vp = getattr(processor, "video_processor", None)
    if vp is not None and (cfg.video_min_pixels is not None or cfg.video_max_pixels is not None):
        size = dict(vp.size)
        if cfg.video_min_pixels is not None:
            size["shortest_edge"] = cfg.video_min_pixels
        if cfg.video_max_pixels is not None:
            size["longest_edge"] = cfg.video_max_pixels
        vp.size = size
    if vp is not None and hasattr(vp, "cap_pixels_per_frame"):
        vp.cap_pixels_per_frame = True  # qwen-vl-utils' per-video pixel budget (transformers' future default)
    processor.video_limits = {"max_frames": cfg.video_max_frames, "total_pixels": cfg.video_total_pixels}


def _wrap_lora(model, cfg: ModelConfig):
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
        # language-model projections only: the vision tower keeps its own weights
        target_modules=adapter_for(model.config.model_type).lora_target,
    )
    return get_peft_model(model, lora, autocast_adapter_dtype=True)  # float32 adapters over a bf16 base: the masters
