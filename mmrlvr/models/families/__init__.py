"""Tiny random models of each supported VLM family, built offline: `model.path=tiny:<model_type>`.

Each builder uses the family's own transformers config, model and processor classes with the
project's small tokenizer (the family's special tokens and chat layout). Plain `tiny` and
`tiny:qwen2_5_vl` are the embedded default of `mmrlvr.models.tiny`, byte for byte unchanged.
Builds are cached under $MMRLVR_CACHE like the default and take a few seconds. Which families
there are, and each one's builder, is read from its record (`mmrlvr.models.family_spec`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mmrlvr.models import tiny
from mmrlvr.models.families.common import MARKER, save_atomic
from mmrlvr.models.family_spec import DEFAULT_FAMILY, family_spec, family_specs

PREFIX = "tiny:"
FAMILY_VERSION = 1  # bump when a family recipe changes, so cached copies are rebuilt


def _builders() -> dict:
    """model_type -> tiny builder of every family built here besides the embedded default."""
    return {s.model_type: s.builder() for s in family_specs() if s.tiny_builder and s.model_type != DEFAULT_FAMILY}


def families() -> tuple[str, ...]:
    """The families with a tiny build, the default first: every record of `mmrlvr.models.family_spec`
    that names a tiny builder (also `FAMILIES`, read on each access)."""
    return tuple(s.model_type for s in family_specs() if s.tiny_builder)


def __getattr__(name: str):
    if name == "FAMILIES":
        return families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_tiny(path: str) -> bool:
    return path == tiny.TINY_NAME or path.startswith(PREFIX)


def tiny_model_type(path: str) -> str:
    """"tiny" -> "qwen2_5_vl"; "tiny:<model_type>" -> model_type, checked against FAMILIES."""
    if path == tiny.TINY_NAME:
        return DEFAULT_FAMILY
    mt = path.removeprefix(PREFIX)
    known = families()
    if mt not in known:
        raise ValueError(f"model.path {path!r}: no tiny builder for {mt!r}; known: "
                         + ", ".join(PREFIX + f for f in known))
    return mt


def build_family(model_type: str, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Build one family's tiny model + processor into `out_dir` (atomically)."""
    if model_type == DEFAULT_FAMILY:
        return tiny.build_tiny(out_dir, seed=seed)
    model, processor = family_spec(model_type).builder()(seed=seed)
    return save_atomic(out_dir, model, processor, {"version": FAMILY_VERSION, "seed": seed, "model_type": model_type})


def family_cache_dir(model_type: str) -> Path:
    if model_type == DEFAULT_FAMILY:
        return tiny.tiny_cache_dir()
    root = os.environ.get("MMRLVR_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mmrlvr"))
    return Path(root) / f"tiny-{model_type}-v{FAMILY_VERSION}"


def ensure_family(path: str) -> Path:
    """The cached directory of `tiny` / `tiny:<model_type>`, built on first use."""
    mt = tiny_model_type(path)
    if mt == DEFAULT_FAMILY:
        return tiny.ensure_tiny()
    out = family_cache_dir(mt)
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("version") == FAMILY_VERSION:
        return out
    return build_family(mt, out)
