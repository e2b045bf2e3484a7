"""Task definitions: each module builds samples (messages + media + reference + verifier name)."""

from __future__ import annotations

import importlib

from mmrlvr.types import Sample


def load_task(name: str, split: str, size: int, seed: int, **args) -> list[Sample]:
    """Build `size` samples of task `name` ("counting" or "package.module") for a split."""
    module_name = name if "." in name else f"mmrlvr.tasks.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise KeyError(f"unknown task {name!r}: no module {module_name}") from None
    return module.build(split=split, size=size, seed=seed, **args)
