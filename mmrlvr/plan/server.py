"""The rollout server's GPUs in the memory plan (`rollout.engine=vllm_server`).

With a server the rollout's weights and KV cache are on the server's GPUs, not the trainer's: the
trainer's rollout and evaluation phases hold only what stays resident. Each server GPU holds
1/N of the weights (tensor parallel N: vLLM cuts every layer N ways) and gives the rest of vLLM's
share (`--gpu-memory-utilization`, 0.9 by default) to the KV cache, whose keys and values are cut
N ways too (a model with fewer key/value heads than N keeps one head per GPU, as vLLM replicates
them). How many of a step's sequences fit in that cache at once is what decides whether the
server keeps up: every replica (data parallel M) holds its own.

Arithmetic from the model's config, like the rest of the plan; vLLM's own activation buffers and
CUDA graphs (a few percent of its share) are not counted.
"""

from __future__ import annotations

from mmrlvr.plan.activations import DTYPE_BYTES
from mmrlvr.plan.shape import ModelShape

GB = 2**30
SERVER_SHARE = 0.9  # `mmrlvr rollout-server --gpu-memory-utilization` default


def kv_bytes_per_token(s: ModelShape, dtype: str, tensor_parallel: int) -> int:
    """One token's keys and values on one server GPU: layers x 2 x (its key/value heads) x head dim."""
    heads_here = max(1, s.kv_heads // tensor_parallel)
    return s.layers * 2 * heads_here * s.head_dim * DTYPE_BYTES[dtype]


def server_plan(s: ModelShape, dtype: str, gpu_gb: float, tensor_parallel: int, data_parallel: int,
                sequence_tokens: int, rows: int, share: float = SERVER_SHARE) -> dict:
    """Per server GPU: weights, the KV cache left in vLLM's share, and the sequences of
    `sequence_tokens` (prompt + completion) it holds at once; against the step's `rows` sequences."""
    weights = s.params * DTYPE_BYTES[dtype] / tensor_parallel
    kv = share * gpu_gb * GB - weights
    per_token = kv_bytes_per_token(s, dtype, tensor_parallel)
    at_once = max(0, int(kv // (per_token * sequence_tokens))) if kv > 0 else 0
    return {"tensor_parallel": tensor_parallel, "data_parallel": data_parallel, "gpus": tensor_parallel * data_parallel,
            "gpu_memory_gb": gpu_gb, "share": share, "weights_gb": round(weights / GB, 2),
            "kv_cache_gb": round(max(kv, 0) / GB, 2), "kv_bytes_per_token": per_token,
            "sequence_tokens": sequence_tokens, "sequences_at_once": at_once * data_parallel,
            "step_sequences": rows, "fits": kv > 0 and at_once >= 1}


def format_server(p: dict) -> str:
    """The server's lines under the trainer's plan."""
    rounds = -(-p["step_sequences"] // p["sequences_at_once"]) if p["sequences_at_once"] else None
    head = (f"rollout server: {p['data_parallel']} x {p['tensor_parallel']} GPUs (data x tensor parallel) of "
            f"{p['gpu_memory_gb']:g} GB, vLLM share {p['share']:g}")
    if not p["fits"]:
        return (f"{head}\nserver GPU  weights {p['weights_gb']:.1f} GB: DOES NOT FIT "
                f"(no KV cache left for one {p['sequence_tokens']}-token sequence; raise --tensor-parallel-size)")
    return (f"{head}\nserver GPU  weights {p['weights_gb']:.1f} GB + KV cache {p['kv_cache_gb']:.1f} GB "
            f"({p['kv_bytes_per_token']} bytes a token): {p['sequences_at_once']} sequences of "
            f"{p['sequence_tokens']} tokens at once across replicas; a step's {p['step_sequences']} in "
            f"{rounds} round{'s' if rounds != 1 else ''}")
