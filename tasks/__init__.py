"""Task definitions: each module builds samples (messages + media references + reference + verifier).

Installed as `mmrlvr.tasks` (setup.py package_dir). A task is one module with
`build(split, size, seed, **args) -> sequence of Sample`; adding a task is adding one file.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from mmrlvr.types import Sample


class UnknownTask(KeyError):
    """No module for a task name (a KeyError, as callers of `task_module` have always caught)."""


def task_module(name: str):
    """The module of task `name` ("counting" -> mmrlvr.tasks.counting, or "package.module").

    The one lookup of a task name: training, the CLI, the API and `mmrlvr.checks.validate` all call it,
    so a config that validates is a config that loads. A task module whose own imports fail
    raises that ModuleNotFoundError (its missing dependency), not UnknownTask."""
    import re

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name):
        raise UnknownTask(f"task name {str(name)[:80]!r}: expected a task name or a dotted module path "
                          "(letters, digits, _ and .), not a file path")
    module_name = name if "." in name else f"mmrlvr.tasks.{name}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise UnknownTask(f"unknown task {name!r}: no module {module_name}") from None


def load_task(name: str, split: str, size: int, seed: int, **args) -> list[Sample]:
    """Build `size` samples of task `name` ("counting" or "package.module") for a split.

    A task's own ValueError (a bad argument value, an unusable file) becomes a one-line DataError."""
    from mmrlvr.data.io import DataError

    module = task_module(name)
    try:
        return module.build(split=split, size=size, seed=seed, **args)
    except DataError:
        raise
    except ValueError as exc:
        raise DataError(f"task {name} ({split} split): {str(exc)[:300]}") from None


def model_type_of(path: str) -> str | None:
    """`config.model_type` of a model path ("tiny", a local directory or a hub name), or None."""
    from mmrlvr.models.families import is_tiny, tiny_model_type

    if is_tiny(path):
        return tiny_model_type(path)  # "tiny" is a tiny Qwen2.5-VL; "tiny:<model_type>" names its family
    config = Path(path).expanduser() / "config.json"
    if config.is_file():
        return json.loads(config.read_text()).get("model_type")
    try:  # a hub name: the config is small and usually cached next to the weights
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path).model_type
    except Exception:  # noqa: BLE001 - offline or unknown: the task's default convention applies
        return None
