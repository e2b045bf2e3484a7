"""A model config checked before anything is built from it: validation (`model_dir_problem`) and
`mmrlvr plan` must answer in bounded time and memory for any config.json, and say in one line what is
wrong with a malformed one.

The meta-device build the plan counts parameters on costs time per module, not memory, so the checks
bound the counts that multiply modules (layers, vision depth, experts) and the sizes the arithmetic
reads, and refuse what transformers would fail on later with a traceback (a zero head count, a
string size, a model type that has no image-text-to-text class).
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrlvr.config import ConfigError

SIZE_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
             "vocab_size", "embed_dim", "out_hidden_size", "patch_size", "spatial_merge_size",
             "temporal_patch_size", "num_heads", "image_size", "mm_tokens_per_image")
COUNT_KEYS = ("num_hidden_layers", "depth", "num_experts", "num_local_experts")
MAX_SIZE = 1 << 20  # a width, head count or vocabulary past a million is no model this plan can size
MAX_COUNT = 1024  # layers or blocks: each one is a module the meta build creates


def _image_text_types() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)


def _section_problems(where: str, section: dict) -> list[str]:
    problems = []
    for key in (*SIZE_KEYS, *COUNT_KEYS):
        if key not in section or section[key] is None:
            continue
        value, limit = section[key], MAX_COUNT if key in COUNT_KEYS else MAX_SIZE
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{where}{key}={json.dumps(value)[:40]}: expected an integer")
        elif not 0 < value <= limit:
            problems.append(f"{where}{key}={value}: expected an integer in [1, {limit}]")
    heads, hidden = section.get("num_attention_heads"), section.get("hidden_size")
    if (not problems and isinstance(heads, int) and isinstance(hidden, int) and section.get("head_dim") is None
            and hidden % heads):
        problems.append(f"{where}hidden_size={hidden} is not a multiple of num_attention_heads={heads}")
    return problems


def model_config_problems(raw: object) -> list[str]:
    """Every problem of a config.json's contents (empty: it can be built on the meta device)."""
    if not isinstance(raw, dict):
        return [f"expected a JSON object, got {type(raw).__name__}"]
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return ["model_type is missing: expected the model's type (e.g. qwen2_5_vl)"]
    if model_type not in _image_text_types():
        return [f"model_type={model_type!r} has no image-text-to-text model in transformers "
                "(a text-only type such as llama, or an unknown one): expected a vision-language model"]
    problems = _section_problems("", raw)
    for name in ("text_config", "vision_config"):
        section = raw.get(name)
        if section is not None and not isinstance(section, dict):
            problems.append(f"{name}: expected a JSON object, got {type(section).__name__}")
        elif section:
            problems += _section_problems(f"{name}.", section)
    return problems


def _read_json(path: Path, named: str) -> object:
    """A JSON file's contents, or one ConfigError line: `named` (the file, as the caller names it)."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{named}: not readable JSON ({str(exc)[:120]})") from None


def read_model_config(config_file: Path) -> dict:
    """config.json's contents, checked: one ConfigError line naming the file and every problem."""
    raw = _read_json(config_file, f"model config {config_file}")
    problems = model_config_problems(raw)
    if problems:
        raise ConfigError(f"model config {config_file}: " + "; ".join(problems))
    return raw


def read_json_object(path: Path) -> dict:
    """A processor's JSON file as a dict, or one ConfigError line naming it."""
    data = _read_json(path, str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
