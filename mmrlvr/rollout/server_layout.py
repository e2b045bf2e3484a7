"""The rollout server's device layout (`--tensor-parallel-size N --data-parallel-size M`), checked
before the model loads: vLLM's own refusals come after minutes of start-up, or as a hang.

N devices hold one copy of the policy, its attention heads cut N ways (vLLM's tensor parallelism);
M such copies serve at once (data parallel, `server_replicas`): N x M devices in all, N x M
workers that every weight update must reach.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from mmrlvr.rollout import weight_channel


def _heads(config: dict) -> list[tuple[str, int]]:
    """(where, count) of every head count tensor parallelism cuts: the language model's query heads,
    its key/value heads, and the vision tower's heads."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    out = []
    for where, section, key in (("num_attention_heads", text, "num_attention_heads"),
                                ("num_key_value_heads", text, "num_key_value_heads"),
                                ("vision_config.num_heads", vision, "num_heads")):
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out.append((where, value))
    return out


def layout_problem(config: dict, tensor_parallel: int, data_parallel: int, bucket_mb: float = 256.0,
                   visible_devices: str | None = None) -> str | None:
    """Why the layout is refused (one line), or None.

    Query and vision heads must divide by N (each shard holds whole heads); key/value heads must
    divide by N or N by them (vLLM then replicates them); `CUDA_VISIBLE_DEVICES`, when set, must
    hold N x M devices."""
    for flag, value in (("--tensor-parallel-size", tensor_parallel), ("--data-parallel-size", data_parallel)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{flag}={value}: expected a whole number of devices, at least 1"
    why = weight_channel.bucket_problem(int(bucket_mb * 2**20)) if math.isfinite(bucket_mb) else "not a number"
    if why:
        return f"--weight-bucket-mb={bucket_mb:g}: {why}"
    n = tensor_parallel
    for where, heads in _heads(config):
        kv = where == "num_key_value_heads"
        if heads % n and not (kv and n % heads == 0):
            return (f"--tensor-parallel-size={n}: the model's {where}={heads} does not divide into {n} shards "
                    f"(choose a divisor of {heads})")
    if visible_devices:
        count = len([d for d in visible_devices.split(",") if d.strip()])
        if count < n * data_parallel:
            return (f"--tensor-parallel-size={n} x --data-parallel-size={data_parallel} needs {n * data_parallel} "
                    f"devices; CUDA_VISIBLE_DEVICES={visible_devices} holds {count}")
    return None


def model_config_of(model_dir: str) -> dict:
    """The model directory's config.json (checked, one line if unreadable); {} for a hub name not yet here."""
    from mmrlvr.models.config_checks import read_model_config

    file = Path(model_dir) / "config.json"
    return read_model_config(file) if file.is_file() else {}


def cpu_thread_binding(workers: int, cores: list[int]) -> str:
    """vLLM's CPU `VLLM_CPU_OMP_THREADS_BIND` for `workers` tensor-parallel workers: the allowed
    cores cut into that many runs ("0|1" for two workers on two cores). vLLM's own automatic
    binding wants a NUMA node per worker and refuses otherwise."""
    cores = sorted(cores)
    per = max(1, len(cores) // workers)
    runs = [cores[i * per:(i + 1) * per] or cores[-1:] for i in range(workers)]
    return "|".join(",".join(str(c) for c in run) for run in runs)


def set_cpu_binding(workers: int) -> None:
    """On CPU with several workers, bind each to its own cores unless the user already chose."""
    if workers > 1 and not os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_thread_binding(workers, sorted(os.sched_getaffinity(0)))
