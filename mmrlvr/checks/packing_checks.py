"""Checks of `train.padding_free` (packed learner forwards), before the model loads: the family
(read from the tiny name or the model directory's config.json) and the attention implementation
must be ones whose packed forward is tested equal to the padded one (`mmrlvr.models.packing`).
A hub name whose config is not on disk is checked when the model is loaded, at its first forward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from mmrlvr.models.family_spec import DEFAULT_FAMILY
from mmrlvr.models.packing import why_not_packed


def local_model_type(path) -> str | None:
    """`config.model_type` of a tiny name or a local model directory; None elsewhere (nothing is fetched)."""
    from mmrlvr.models.families import is_tiny, tiny_model_type

    if not isinstance(path, str):
        return None
    if is_tiny(path):
        try:
            return tiny_model_type(path)
        except Exception:  # noqa: BLE001 - an unknown tiny family is model.path's own check
            return None
    config = Path(path).expanduser() / "config.json"
    try:
        return json.loads(config.read_text()).get("model_type") if config.is_file() else None
    except (OSError, ValueError):
        return None


def check_padding_free(cfg) -> Iterable[str]:
    """`train.padding_free: true` only for a family and attention that pack rows correctly."""
    if not cfg.train.padding_free:
        return
    model_type = local_model_type(cfg.model.path)
    why = why_not_packed(model_type, cfg.model.attn_implementation) if model_type else \
        why_not_packed(DEFAULT_FAMILY, cfg.model.attn_implementation)  # the family is checked at load
    if why:
        yield f"train.padding_free=true: {why}; set train.padding_free: false"  # the runtime refusal's words
