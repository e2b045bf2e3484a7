"""Whether `model.path` names something loadable, read from the files alone (no model loads, no
network): the check validation runs on `model.path` before anything heavy, kept beside the loader."""

from __future__ import annotations

from pathlib import Path


def model_path_problem(path: str) -> str | None:
    """Why `path` is neither the embedded model, a local directory nor a hub name, else None."""
    if path == "tiny":
        return None
    if path.startswith("tiny:"):
        from mmrlvr.models.families import tiny_model_type

        try:
            tiny_model_type(path)
        except ValueError as exc:
            return str(exc).split(": ", 1)[1]
        return None
    local = Path(path).expanduser()
    if local.exists():
        return model_dir_problem(local) if local.is_dir() else "a model directory, not a file"
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    expected = "'tiny' (or 'tiny:<model_type>'), an existing local directory or a hub name (owner/name); no such directory"
    try:
        validate_repo_id(path)
    except HFValidationError:
        return expected
    if "/" not in path:  # every image-text-to-text model on the hub is owner/name
        hint = " (did you mean 'tiny'?)" if path.lower().startswith("tiny") else ""
        return f"{expected}{hint}"
    return None


def model_dir_problem(local: Path) -> str | None:
    """What a local model directory lacks to load (config, weights, tokenizer), read from its
    files' headers only; None when complete. A LoRA adapter directory names its base instead."""
    import json

    if (local / "adapter_config.json").is_file():
        return None
    config = local / "config.json"
    if not config.is_file():
        return f"a model directory with a config.json (none in {local})"
    try:
        raw = json.loads(config.read_text())
    except (ValueError, OSError) as exc:
        return f"{config} is not readable JSON ({str(exc)[:80]})"
    from mmrlvr.models.config_checks import model_config_problems

    problems = model_config_problems(raw)
    if problems:
        return f"{config}: " + "; ".join(problems)
    shards = sorted(local.glob("*.safetensors"))
    index = local / "model.safetensors.index.json"
    if index.is_file():
        try:
            named = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, OSError, KeyError, TypeError, AttributeError):
            return f"{index} is not a readable weight index"
        missing = [n for n in named if not (local / n).is_file()]
        if missing:
            return f"{index} names {missing[0]}, which is not in {local}"
    if not shards and not any(local.glob("pytorch_model*.bin")):
        return f"a model directory with weights (no *.safetensors or pytorch_model*.bin in {local})"
    from safetensors import safe_open

    for shard in shards:
        try:
            with safe_open(str(shard), "pt") as f:
                f.keys()
        except Exception as exc:  # noqa: BLE001 - truncated, empty or not safetensors
            return f"{shard.name} is not a complete safetensors file ({str(exc).splitlines()[0][:80]})"
    tokenizer = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if not any((local / name).is_file() for name in tokenizer):
        return f"a model directory with a tokenizer (none of {', '.join(tokenizer)} in {local})"
    return None


HUB_PROBE_TIMEOUT = 5.0  # seconds the hub may take to answer one HEAD request before it counts as unreachable


def hub_problem(path: str) -> str | None:
    """Why the hub name `path` cannot be had on this machine, else None: it is in the local
    Hugging Face cache, or the hub answers for it. Read before anything loads, so a machine
    without a network hears it in seconds, not after a minute of the loader's retries."""
    import os

    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return None
    where = f"expected a model this machine can get: it is not in the local Hugging Face cache ({constants.HF_HUB_CACHE})"
    offline = [v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
               if os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")]
    fix = "download it where there is a network, or point model.path at a local directory"
    if offline or constants.HF_HUB_OFFLINE:
        return f"{where} and {(offline or ['HF_HUB_OFFLINE'])[0]}=1 forbids a download; {fix}"
    try:
        get_hf_file_metadata(hf_hub_url(path, "config.json"), timeout=HUB_PROBE_TIMEOUT)
    except GatedRepoError:
        return f"{where} and the hub says it is gated (accept its terms on the hub, then `hf auth login`)"
    except RepositoryNotFoundError:
        return f"{where} and the hub has no such repository (or it is private)"
    except Exception as exc:  # noqa: BLE001 - no network, DNS, proxy, time-out: all mean "cannot download"
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        return f"{where} and the hub does not answer ({why}); {fix}"
    return None
