"""Settings the machine cannot hold, refused before anything heavy runs.

`rollout.group_size=1000000` once grew a process to 22 GB until the kernel's OOM killer ended it
without a word, and `task.train_size=10**12` built samples until it was stopped. Each bound here
is one line naming the key, what it would take and what this machine has:

- token lengths against the model's context (`max_position_embeddings` of its config, read from
  the directory or the local cache; nothing is downloaded);
- the rows one `generate` call holds (prompts x group size, or `rollout.generate_max_rows`),
  whose KV cache and logits are estimated from the model's config against the memory of the
  device it will run on (the GPU's, else this machine's available memory);
- sizes of generated tasks, which build every sample up front;
- `device=cuda` where torch sees no CUDA device, and `device=auto` under a launch that asked for
  GPUs there (`check_device`, `check_launch_device`: validation's `MACHINE_CHECKS`, so a config
  written for GPUs stays valid where it is only planned or read).

The memory figure is an estimate (a lower bound: prompts counted at `PROMPT_TOKENS`), enough to
refuse what cannot fit; `mmrlvr plan` gives the full per-phase picture on GPUs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Mapping

from mmrlvr.checks.rules import _line

PROMPT_TOKENS = 64  # tokens a prompt is counted at (its image and text), for a lower bound
MAX_GENERATED_SAMPLES = 1_000_000  # a generated task builds (and holds) every sample up front
TINY_CONTEXT = 2048  # max_position_embeddings of every embedded tiny model
ROW_BYTES = 2048  # a completion's Python objects (text, ids, verdict) besides its (T,) tensors


def text_config(path: str) -> dict | None:
    """The language model's config fields that size it, from a local directory or the cache; None
    when it cannot be read offline (the model loader then says why)."""
    from mmrlvr.models.families import is_tiny

    if is_tiny(path):
        return {"max_position_embeddings": TINY_CONTEXT, "num_hidden_layers": 4, "num_key_value_heads": 2,
                "head_dim": 32, "vocab_size": 640}
    raw = None
    file = Path(path).expanduser() / "config.json"
    try:
        if file.is_file():
            raw = json.loads(file.read_text())
        else:
            from transformers import AutoConfig

            raw = AutoConfig.from_pretrained(path, local_files_only=True).to_dict()
    except Exception:  # noqa: BLE001 - unreadable or not cached: not this check's to report
        return None
    text = (raw.get("text_config") or raw) if isinstance(raw, dict) else None
    if not isinstance(text, dict):
        return None
    count = lambda v: v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None  # noqa: E731
    heads, hidden = count(text.get("num_attention_heads")) or 1, count(text.get("hidden_size")) or 0
    return {"max_position_embeddings": count(text.get("max_position_embeddings")),
            "num_hidden_layers": count(text.get("num_hidden_layers")),
            "num_key_value_heads": count(text.get("num_key_value_heads")) or heads,
            "head_dim": count(text.get("head_dim")) or hidden // heads,
            "vocab_size": count(text.get("vocab_size")) or count(raw.get("vocab_size"))}


def device_memory_bytes() -> tuple[int, str] | None:
    """(bytes, what) the rollout can use: the first GPU's memory, else this machine's available
    memory (MemAvailable); None where neither can be read."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory, "the GPU's memory"
    except Exception:  # noqa: BLE001
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "this machine's available memory"
    except OSError:
        pass
    return None


def generate_bytes(rows: int, new_tokens: int, text: dict, dtype_bytes: int) -> int:
    """Lower bound on one `generate` call's memory: the KV cache of `rows` sequences of
    PROMPT_TOKENS + new_tokens, and one step's float32 logits and probabilities over the vocab."""
    per_token = 2 * text["num_hidden_layers"] * text["num_key_value_heads"] * text["head_dim"] * dtype_bytes
    return rows * ((PROMPT_TOKENS + new_tokens) * per_token + 2 * 4 * text["vocab_size"])


def _dtype_bytes(dtype: str | None) -> int:
    return 2 if dtype in ("bfloat16", "float16") else 4


def check_bounds(cfg) -> Iterable[str]:
    """One line per setting the model or the machine cannot hold (see the module docstring)."""
    from mmrlvr.checks.rules import _num

    r = cfg.rollout
    nums = [r.group_size, r.prompts_per_step, r.max_new_tokens]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in nums):
        return  # the rules name a bad value themselves
    yield from _check_generated_size(cfg)
    text = text_config(str(cfg.model.path)) if isinstance(getattr(cfg.model, "path", None), str) else None
    if text is None or not all(isinstance(text.get(k), int) and text[k] > 0 for k in
                               ("num_hidden_layers", "num_key_value_heads", "head_dim", "vocab_size")):
        return
    context = text.get("max_position_embeddings")
    if isinstance(context, int) and context > 0:
        for key, value in (("rollout.max_new_tokens", r.max_new_tokens), ("eval.max_new_tokens", cfg.eval.max_new_tokens)):
            if _num(value) and value >= context:
                yield _line(key, value, f"expected fewer than the model's context of {context:,} tokens "
                                        "(its max_position_embeddings), which the prompt shares")
    rows = r.prompts_per_step * r.group_size
    cap = getattr(r, "generate_max_rows", None)
    per_call = min(rows, cap) if isinstance(cap, int) and cap > 0 else rows
    memory = device_memory_bytes()
    if memory is None:
        return
    have, what = memory
    need = generate_bytes(per_call, min(r.max_new_tokens, context or r.max_new_tokens), text,
                          _dtype_bytes(getattr(cfg.model, "dtype", None)))
    held = rows * (ROW_BYTES + 32 * r.max_new_tokens)
    if held > have:
        yield _line("rollout.group_size", r.group_size,
                    f"a step of {rows:,} rows (rollout.prompts_per_step x group_size) holds at least "
                    f"{held / 2**30:,.1f} GB of completions and their tensors, more than {what} "
                    f"({have / 2**30:,.1f} GB); lower them")
    elif need > have:
        key = "rollout.generate_max_rows" if per_call != rows else "rollout.group_size"
        value = per_call if per_call != rows else r.group_size
        yield _line(key, value, f"one generate call of {per_call:,} rows (rollout.prompts_per_step x group_size"
                                f"{', capped by generate_max_rows' if per_call != rows else ''}) needs at least "
                                f"{need / 2**30:,.1f} GB for its KV cache and logits, more than {what} "
                                f"({have / 2**30:,.1f} GB); lower them, or set rollout.generate_max_rows")


def _check_generated_size(cfg) -> Iterable[str]:
    """A generated task (no data columns) builds every sample when it loads."""
    try:
        from mmrlvr.tasks import task_module

        module = task_module(cfg.task.name)
    except Exception:  # noqa: BLE001 - the task check names an unknown task
        return
    if hasattr(module, "COLUMNS"):
        return
    for key in ("train_size", "eval_size"):
        value = getattr(cfg.task, key, None)
        if isinstance(value, int) and value > MAX_GENERATED_SAMPLES:
            yield _line(f"task.{key}", value, f"expected at most {MAX_GENERATED_SAMPLES:,}: task {cfg.task.name!r} "
                                              "generates every sample up front (RL uses train.steps x "
                                              f"rollout.prompts_per_step = {cfg.train.steps * cfg.rollout.prompts_per_step:,} prompts)")


def cuda_problem() -> str | None:
    """Why torch has no usable CUDA device here, in torch's own words; None when it has one.
    `torch.cuda.init()` is called only after `is_available()` said no: it raises the reason."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        why = "this torch is a CPU-only build"
    else:
        try:
            torch.cuda.init()
            why = f"{torch.cuda.device_count()} devices"
        except Exception as exc:  # noqa: BLE001 - the driver's own reason is the useful part
            why = str(exc).split(". ")[0].strip().rstrip(".") or type(exc).__name__
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None:
        why += f"; CUDA_VISIBLE_DEVICES={hidden!r}"
    return f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False: {why})"


def check_device(cfg) -> Iterable[str]:
    """`device=cuda` on a machine without a usable CUDA: one line before the model loads, not a
    run that trains on the CPU under a config that says cuda."""
    if cfg.device == "cuda":
        why = cuda_problem()
        if why:
            yield f"device=cuda but {why}"


def gpu_launch(env: Mapping[str, str]) -> str | None:
    """What of this process's launch asked for GPUs, else None.

    accelerate's GPU launcher (`--multi_gpu`, or a config file with `distributed_type: MULTI_GPU`)
    starts the ranks with torch's elastic runner and, unlike its CPU launcher (`--cpu`, which sets
    ACCELERATE_USE_CPU), says nothing about the device; on a machine without CUDA the ranks would
    then quietly pair up over gloo on the CPU. torchrun alone sets no ACCELERATE_* variable and asks
    for no device. FSDP and DeepSpeed launches are named by the setup's own sharding check."""
    launched = "ACCELERATE_MIXED_PRECISION" in env and "WORLD_SIZE" in env  # every accelerate launcher sets it
    sharded = any(str(env.get(v, "")).lower() == "true" for v in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"))
    if not launched or sharded or "ACCELERATE_USE_CPU" in env:
        return None
    return (f"the launch asks for GPUs (accelerate launch --multi_gpu or distributed_type: MULTI_GPU, "
            f"{env['WORLD_SIZE']} processes, ACCELERATE_USE_CPU unset)")


def check_launch_device(cfg, env: Mapping[str, str] | None = None) -> Iterable[str]:
    """`device=auto` under a GPU launch on a machine without a usable CUDA: one line on every rank
    before the process group or the model is set up (each rank judges its own environment, so no
    rank waits for another), not a multi-GPU run that trains on the CPU. `device=cuda` is
    `check_device`'s; `device=cpu` asked for the CPU whatever the launcher."""
    asked = gpu_launch(os.environ if env is None else env) if cfg.device == "auto" else None
    why = cuda_problem() if asked else None
    if why:
        yield (f"device=auto but {asked} and {why}: to run on the CPU set device=cpu, or launch with "
               "accelerate launch --cpu (one process) or torchrun --nproc_per_node N (gloo)")
