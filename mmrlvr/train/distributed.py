"""Data parallelism across ranks: which prompts a rank owns, sums over ranks, the dummy vision pass.

Every helper is the identity in a single process, so the one-process path pays nothing. Ranks
come from torch.distributed (set up by `accelerate launch` / `torchrun`); nothing home-made.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import torch
import torch.distributed as dist

from mmrlvr.models.adapters import model_adapter
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


def media_parameters(model) -> list:
    """The parameters a prompt's media go through: everything in the multimodal model but its
    language model (vision tower, merger or projector or connector, LLaVA's image_newline). Which
    module is the language model is the family's (`mmrlvr.models.adapters`)."""
    inner = getattr(base_model(model), "model", None)
    if inner is None:
        return []
    language = model_adapter(model).language_module + "."
    return [p for name, p in inner.named_parameters() if not name.startswith(language)]


def vision_tower_trainable(model) -> bool:
    return any(p.requires_grad for p in media_parameters(model))


def vision_sharded(model) -> bool:
    """FSDP2 (DTensor) or ZeRO-3 (`ds_id`) parameters: every forward is a collective."""
    return any(is_shard(p) for p in media_parameters(model))


def vision_needs_all_ranks(model, grad: bool) -> bool:
    """Must a rank without media still run the vision tower? Only with several ranks, and then
    for a training forward when the tower trains (DDP waits for its gradients) or whenever its
    parameters are sharded (the all-gather waits for every rank)."""
    if rank_world()[1] == 1:
        return False
    return (grad and vision_tower_trainable(model)) or vision_sharded(model)


_DUMMY_MEDIA: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # base model -> one blank image's encoder inputs


def _blank_sample(video: bool):
    """A prompt holding one small blank image (and a 4-frame blank video) and one word."""
    import numpy as np
    from PIL import Image

    from mmrlvr.types import Sample

    kinds = [{"type": "image"}] + ([{"type": "video"}] if video else [])
    return Sample("blank-media", ({"role": "user", "content": [*kinds, {"type": "text", "text": "."}]},), None,
                  images=(Image.new("RGB", (32, 32)),), videos=(np.zeros((4, 32, 32, 3), dtype=np.uint8),) if video else ())


def remember_dummy_media(model, processor) -> None:
    """Encode one small blank image with the policy's own processor, once, for `dummy_vision_pass`:
    the families' image encoders take other inputs (a pixel batch, tiles with a mask, anyres
    patches with their sizes), and the processor is what makes them."""
    from mmrlvr.data.collate import encode_prompts

    inputs = encode_prompts(processor, [_blank_sample(video=False)])
    keys = model_adapter(model).feature_inputs.get("image") or ()
    _DUMMY_MEDIA[base_model(model)] = {k: inputs[k] for k in keys}


def freeze_unreachable(model, processor) -> list[str]:
    """Freeze the trainable parameters no forward reaches; returns their names.

    Some families hold parameters their forward never uses (LLaVA-OneVision's vision tower has a
    post-layernorm, but its features are taken from the last hidden state before it). They never
    get a gradient, and DDP without `find_unused_parameters` then stops at the next forward
    ("Expected to have finished reduction in the prior iteration"). One backward of a prompt
    with a blank image (and a blank video, where the family takes video) finds them; freezing
    changes nothing else, since optimizers skip parameters without a gradient. The loop does it
    in one process too (not under FSDP or ZeRO-3, where a full backward before sharding would
    cost a whole model's gradients), so the optimizer holds the same parameters whatever the
    number of processes a run is resumed with. Only media parameters are frozen: a
    language-model parameter this prompt does not reach is left to DDP to name (no family has
    one; a probe gone wrong must not freeze the language model)."""
    from mmrlvr.data.collate import encode_prompts, model_kwargs

    video = "video" in model_adapter(model).feature_inputs
    device = next(model.parameters()).device
    inputs = model_kwargs(encode_prompts(processor, [_blank_sample(video)]), device)
    model.zero_grad(set_to_none=True)
    was_training = model.training
    model.eval()  # no dropout: the probe draws no random numbers, so the run's draws stay as they were
    with torch.enable_grad():
        model(**inputs).logits.float().mean().backward()
    model.train(was_training)
    media = {id(p) for p in media_parameters(model)}
    unreachable = [(name, p) for name, p in model.named_parameters()
                   if p.requires_grad and p.grad is None and id(p) in media]
    model.zero_grad(set_to_none=True)
    for _, p in unreachable:
        p.requires_grad_(False)
    return [name for name, _ in unreachable]


def dummy_vision_pass(model) -> torch.Tensor:
    """A zero-weight pass through every media parameter on one blank image; a scalar 0 with a graph.

    Under DDP a rank whose micro-batch has no image or video would leave those parameters'
    gradients unset and the all-reduce would wait forever (FSDP / ZeRO-3 would wait in the
    parameter all-gather instead). Adding `0 * (sum of every encoder output)` to the loss makes
    every rank run the same modules and send zero gradients; the update is unchanged. The Qwen
    families' input is one merge window of zero patches; the others' the blank image
    `remember_dummy_media` encoded (the training loop does that once with several ranks).
    """
    inner = base_model(model)
    device = next(inner.parameters()).device
    dtype = media_parameters(inner)[0].dtype
    if model_adapter(inner).layout == "grid":  # the smallest input there is, no processor needed
        inputs = _zero_patches(inner.config.vision_config, device, dtype)
    else:
        inputs = _DUMMY_MEDIA.get(inner)
    if inputs is None:
        raise RuntimeError(f"{inner.config.model_type}: no blank image to run the vision tower on; call "
                           "mmrlvr.train.distributed.remember_dummy_media(model, processor) once before training")
    args = [v.to(device, dtype) if v.is_floating_point() else v.to(device) for v in inputs.values()]
    out = inner.model.get_image_features(*args, return_dict=True)
    return 0.0 * _sum_tensors(out)


def _zero_patches(vc, device, dtype) -> dict:
    """One merge window of zero patches in Qwen's flat layout: (merge^2, C * T * P^2) and its (1, 3) grid."""
    merge = getattr(vc, "spatial_merge_size", 2)
    channels = getattr(vc, "in_channels", getattr(vc, "in_chans", 3))
    width = channels * getattr(vc, "temporal_patch_size", 2) * vc.patch_size**2
    return {"pixel_values": torch.zeros(merge * merge, width, device=device, dtype=dtype),
            "image_grid_thw": torch.tensor([[1, merge, merge]], device=device)}


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
