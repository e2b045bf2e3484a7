"""Load any image-text-to-text model and its processor: the tiny default and real checkpoints alike."""

from __future__ import annotations

from pathlib import Path

import torch

from mmrlvr.config import ModelConfig
from mmrlvr.models.tiny import TINY_NAME, ensure_tiny

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(path: str) -> str:
    """"tiny" -> the embedded default's directory (built on first use); anything else unchanged."""
    return str(ensure_tiny()) if path == TINY_NAME else path


def load_policy(path_or_cfg: str | Path | ModelConfig = TINY_NAME):
    """Return (model, processor) through AutoModelForImageTextToText + AutoProcessor.

    The same call loads `Qwen/Qwen2.5-VL-3B-Instruct` on a GPU machine and the embedded tiny model
    here: the only difference is the directory.
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    cfg = path_or_cfg if isinstance(path_or_cfg, ModelConfig) else ModelConfig(path=str(path_or_cfg))
    if cfg.dtype not in _DTYPES:
        raise ValueError(f"model.dtype {cfg.dtype!r} unknown; known: {', '.join(_DTYPES)}")
    path = resolve_model_path(cfg.path)
    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=_DTYPES[cfg.dtype], attn_implementation=cfg.attn_implementation
    )
    proc_kwargs = {}
    if cfg.min_pixels is not None or cfg.max_pixels is not None:
        size = {}
        if cfg.min_pixels is not None:
            size["shortest_edge"] = cfg.min_pixels
        if cfg.max_pixels is not None:
            size["longest_edge"] = cfg.max_pixels
        proc_kwargs["size"] = size
    processor = AutoProcessor.from_pretrained(path, **proc_kwargs)
    processor.tokenizer.padding_side = "left"
    _set_video_limits(processor, cfg)
    if cfg.freeze_vision:
        visual = getattr(getattr(model, "model", model), "visual", None)
        if visual is not None:
            visual.requires_grad_(False)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora_rank > 0:
        model = _wrap_lora(model, cfg)
    return model, processor


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
        target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    )
    return get_peft_model(model, lora)
