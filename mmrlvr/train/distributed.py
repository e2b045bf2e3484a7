"""Data parallelism across ranks: which prompts a rank owns, sums over ranks, the dummy vision pass.

Every helper is the identity in a single process, so the one-process path pays nothing. Ranks
come from torch.distributed (set up by `accelerate launch` / `torchrun`); nothing home-made.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from mmrlvr.models.wrapping import base_model, is_shard


def rank_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _device() -> torch.device:
    # nccl reduces CUDA tensors only; gloo (CPU) takes CPU tensors
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shard(items: Sequence, rank: int, world: int) -> list:
    """The rank's contiguous slice of a global list whose length divides by `world`.

    Prompts are sharded, never completions: each group of G lives on one rank, so its advantages
    are computed from the complete group with no communication.
    """
    if len(items) % world:
        raise ValueError(f"{len(items)} prompts cannot be split evenly over {world} ranks")
    k = len(items) // world
    return list(items[rank * k : (rank + 1) * k])


def rank_seed(seed: int, rank: int, world: int) -> int:
    """A sampling seed per rank: unchanged in one process, distinct on every rank."""
    return seed * world + rank


def all_reduce(values: Sequence[float] | torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Reduce a small vector of numbers over all ranks (float64 on CPU when returned)."""
    t = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if rank_world()[1] == 1:
        return t
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    t = t.to(_device())
    dist.all_reduce(t, op=ops[op])
    return t.cpu()


def all_sum(x: float) -> float:
    return float(all_reduce([x], "sum")[0])


def all_max(x: float) -> float:
    return float(all_reduce([x], "max")[0])


def reduce_metrics(metrics: dict) -> dict:
    """Per-rank step metrics -> one set for the global batch (every rank gets the same dict).

    Each rank holds the same number of prompts, so the mean over ranks of per-rank means is the
    global mean. Throughputs and counts add up; times take the slowest rank. A metric missing on
    some rank (a reward part no sample there produced) is averaged over the ranks that have it.
    """
    if rank_world()[1] == 1:
        return metrics
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
    out = dict(metrics)
    for key in sorted({k for g in gathered for k in g}):
        vals = [g[key] for g in gathered if key in g and g[key] == g[key]]  # drop NaN
        if not vals:
            out[key] = float("nan")
        elif key.startswith("time/"):
            out[key] = max(vals)
        elif key in SUMMED or key.endswith("tokens_per_s"):
            out[key] = sum(vals)
        else:
            out[key] = sum(vals) / len(vals)
    return out


SUMMED = {"rollout/dropped_groups", "data/bad_media"}


def gather_lists(items: list) -> list:
    """Every rank's list, concatenated in rank order (the list itself in one process)."""
    if rank_world()[1] == 1:
        return list(items)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(items))
    return [x for part in gathered for x in part]


def all_sum_dict(values: dict) -> dict:
    """Sum named numbers over ranks; a name missing on a rank counts as 0 there."""
    if rank_world()[1] == 1:
        return dict(values)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {k: float(v) for k, v in values.items()})
    return {k: sum(g.get(k, 0.0) for g in gathered) for k in sorted({k for g in gathered for k in g})}


def barrier() -> None:
    if rank_world()[1] > 1:
        dist.barrier()


def _visual(model):
    return getattr(getattr(base_model(model), "model", None), "visual", None)


def vision_tower_trainable(model) -> bool:
    visual = _visual(model)
    return visual is not None and any(p.requires_grad for p in visual.parameters())


def vision_sharded(model) -> bool:
    """FSDP2 (DTensor) or ZeRO-3 (`ds_id`) parameters: every forward is a collective."""
    visual = _visual(model)
    return visual is not None and any(is_shard(p) for p in visual.parameters())


def vision_needs_all_ranks(model, grad: bool) -> bool:
    """Must a rank without media still run the vision tower? Only with several ranks, and then
    for a training forward when the tower trains (DDP waits for its gradients) or whenever its
    parameters are sharded (the all-gather waits for every rank)."""
    if rank_world()[1] == 1:
        return False
    return (grad and vision_tower_trainable(model)) or vision_sharded(model)


def dummy_vision_pass(model) -> torch.Tensor:
    """A zero-weight pass through the whole vision tower on one minimal blank image.

    Under DDP a rank whose micro-batch has no image or video would leave the vision tower's
    gradients unset and the all-reduce would wait forever (FSDP / ZeRO-3 would wait in the
    parameter all-gather instead). Adding `0 * (sum of every vision output)` to the loss makes
    every rank run the same modules and send zero gradients; the update is unchanged.
    """
    inner = base_model(model)
    vc = inner.config.vision_config
    merge = getattr(vc, "spatial_merge_size", 2)
    channels = getattr(vc, "in_channels", getattr(vc, "in_chans", 3))
    width = channels * getattr(vc, "temporal_patch_size", 2) * vc.patch_size**2
    device = next(inner.parameters()).device
    dtype = next(inner.model.visual.parameters()).dtype
    pixels = torch.zeros(merge * merge, width, device=device, dtype=dtype)
    grid = torch.tensor([[1, merge, merge]], device=device)
    out = inner.model.get_image_features(pixels, grid, return_dict=True)
    return 0.0 * _sum_tensors(out)


def _sum_tensors(obj) -> torch.Tensor:
    """Sum of every floating tensor inside a (nested) model output: deepstack features included."""
    if isinstance(obj, torch.Tensor):
        return obj.float().sum() if obj.is_floating_point() else torch.zeros(())
    if isinstance(obj, dict) or hasattr(obj, "values"):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        return torch.zeros(())
    total = torch.zeros(())
    for x in items:
        s = _sum_tensors(x)
        total = total.to(s.device) + s
    return total
