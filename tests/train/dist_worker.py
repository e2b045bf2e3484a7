"""One RL update on a fixed global batch, in 1 process or under `torchrun` (gloo, CPU).

Used by tests/train/test_distributed.py: the same global batch and seed must give the same loss
and weights whatever the number of processes. The global batch mixes an image prompt, a video
prompt and two text-only prompts; with 2 ranks, rank 1 holds only the text-only ones, so its
vision tower must still run (zero-weight) or DDP would wait forever for its gradients.

    torchrun --nproc_per_node 2 tests/train/dist_worker.py <tiny_dir> <out_dir> [overrides...]

Config overrides after the directories (`train.micro_batch_tokens=...`) change the update in both
runs alike; the result then also holds every rank's backward-pass count and the batch's no-grad
log-probs (`Learner.logprobs`, before the update), gathered over ranks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
from PIL import Image

B, G = 4, 4
# rewards per prompt (B, G): prompt 0 and 1 carry signal; prompts 2 and 3 (rank 1's in a 2-process
# run) are all-equal, zero advantage: rank 1 then has nothing to update and only pads its passes
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]


def mixed_samples(video: bool = True) -> list:
    """An image prompt, a video prompt (a second image prompt for families without video) and two
    text-only prompts."""
    from mmrlvr.types import Sample

    def msg(*kinds, text):
        return ({"role": "user", "content": [{"type": k} for k in kinds] + [{"type": "text", "text": text}]},)

    frames = np.random.default_rng(0).integers(0, 255, (4, 56, 56, 3), dtype=np.uint8)
    return [
        Sample("img", msg("image", text="How many red shapes?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
        Sample("vid", msg("video", text="Which way does it move?"), 0, videos=(frames,)) if video else
        Sample("img2", msg("image", text="How many shapes?"), 2, images=(Image.new("RGB", (96, 96), (30, 30, 200)),)),
        Sample("txt1", msg(text="Count to three."), 3),
        Sample("txt2", msg(text="How many sides has a square?"), 4),
    ]


def stream_samples(video: bool = True) -> list:
    """Eight prompts with distinct ids for the sharded stream (two of each kind)."""
    import dataclasses

    return [dataclasses.replace(s, id=f"{s.id}-{i}") for i in range(2) for s in mixed_samples(video)]


def takes_video(model) -> bool:
    from mmrlvr.models.adapters import model_adapter

    return "video" in model_adapter(model).feature_inputs


def config(overrides=()):
    from mmrlvr.config import load_config

    return load_config("configs/quickstart.yaml", [
        f"rollout.prompts_per_step={B}", f"rollout.group_size={G}", "rollout.max_new_tokens=6",
        "algo.grad_accum=2", "train.max_grad_norm=1000", "verifier_workers=0", *overrides,
    ])


def global_batch(model, processor, cfg):
    """The same rollout batch on every rank: sampled with one seed before any sharding."""
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.types import RolloutBatch, Verdict

    engine = HFRolloutEngine(model, processor)
    samples = mixed_samples(takes_video(model))
    out = engine.rollout(samples, G, cfg.rollout, seed=0)
    n = B * G
    # uneven lengths (as if some completions stopped early), so the token-mean loss is not 0
    keep = torch.tensor([2 + i % 5 for i in range(n)])
    mask = out.completion_mask * (torch.arange(out.completion_mask.shape[1]) < keep[:, None])
    ids = torch.where(mask.bool(), out.completion_ids, engine.pad_id)
    return RolloutBatch(samples, repeat_prompts(out.prompt_inputs, G), ids, mask,
                        torch.zeros(n, dtype=torch.bool), torch.tensor(REWARDS), [c.text for c in out.completions],
                        [Verdict(0.0)] * n, {}), engine.suppress_ids


def shard_batch(batch, rank: int, world: int):
    """Rank `rank`'s whole groups of a global batch, as `collect` would have produced them."""
    from mmrlvr.data.collate import select_rows
    from mmrlvr.types import RolloutBatch

    k = len(batch.samples) // world
    p = slice(rank * k, (rank + 1) * k)
    rows = list(range(rank * k * G, (rank + 1) * k * G))
    return RolloutBatch(batch.samples[p], select_rows(batch.prompt_inputs, rows), batch.completion_ids[rows],
                        batch.completion_mask[rows], batch.truncated[rows], batch.rewards[p],
                        [batch.texts[r] for r in rows], [batch.verdicts[r] for r in rows], {})


def run(tiny_dir: str, out_dir: str, dtype: str = "float32", overrides=()) -> dict:
    """`dtype` bfloat16: the model computes in bf16 and SGD steps its float32 master weights
    (`precision.MasterWeights`, as the loop does); the deltas are the masters'. `overrides`:
    config overrides (a token budget, say)."""
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.distributed import freeze_unreachable, rank_world, remember_dummy_media
    from mmrlvr.train.learner import Learner
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import advantages_for, collect
    from mmrlvr.verifiers.score import InProcessScorer

    # a short collective time-out: a rank left waiting fails the test instead of hanging CI
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    handlers = [InitProcessGroupKwargs(backend="gloo", timeout=timedelta(seconds=60))] if launched else []
    accelerator = Accelerator(cpu=True, kwargs_handlers=handlers)
    torch.set_num_threads(1)
    rank, world = rank_world()
    cfg = config(overrides)
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens))
    torch.manual_seed(0)
    from mmrlvr.config import ModelConfig
    from mmrlvr.train.precision import MasterWeights, compute_dtype

    model, processor = load_policy(ModelConfig(path=tiny_dir, dtype=dtype), master_weights=True)
    masters = MasterWeights(model, compute_dtype(dtype))  # nothing for float32
    freeze_unreachable(model, processor)  # as the training loop does, in one process too
    if world > 1:  # and the blank image a rank without media encodes
        remember_dummy_media(model, processor)
    video = takes_video(model)
    batch, suppress = global_batch(model, processor, cfg)
    local = shard_batch(batch, rank, world)
    weights = (lambda m: masters.state_dict(m)) if len(masters) else (lambda m: m.state_dict())
    before = {k: v.detach().clone() for k, v in weights(model).items()}
    # SGD, not Adam: Adam's first step hardly depends on the gradient's scale, SGD's is the gradient
    params = masters.params() if len(masters) else [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=1.0)
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    learner = Learner(cfg, wrapped, optimizer, accelerator, suppress, masters=masters if len(masters) else None)
    lp = learner.logprobs(local)  # (rows, T) no-grad, packed like the update under a token budget
    backward, passes = accelerator.backward, [0]

    def counted(loss, **kw):
        passes[0] += 1
        return backward(loss, **kw)

    accelerator.backward = counted
    stats = learner.update(local, advantages_for(local, cfg), seed=1)
    accelerator.backward = backward
    policy = accelerator.unwrap_model(wrapped)
    delta = {k: (v.detach() - before[k]) for k, v in weights(policy).items()}

    # the loop's own path: prompts drawn from one stream, each rank keeps its share
    stream = SeededStream(stream_samples(video), seed=5)
    drawn = collect(HFRolloutEngine(policy, processor), stream, InProcessScorer(), cfg, seed=3)
    ids = [None] * world
    if world > 1:
        torch.distributed.all_gather_object(ids, [s.id for s in drawn.samples])
    else:
        ids = [[s.id for s in drawn.samples]]
    gathered = [None] * world
    if world > 1:
        torch.distributed.all_gather_object(gathered, (passes[0], lp.tolist()))
    else:
        gathered = [(passes[0], lp.tolist())]
    result = {"loss": stats["loss/policy"], "entropy": stats.get("actor/entropy"), "ids": ids,
              "passes": [g[0] for g in gathered], "logprobs": [row for g in gathered for row in g[1]],
              "micro_batches": stats["train/micro_batches"], "padding_waste": stats["train/padding_waste"],
              "expected_ids": [s.id for s in SeededStream(stream_samples(video), seed=5).take(B)],
              "stream_pos": stream.pos, "world": world, "updated": stats["actor/updated_seqs_frac"]}
    if rank == 0:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(delta, out / "delta.pt")
        (out / "result.json").write_text(json.dumps(result))
    accelerator.wait_for_everyone()
    return result


if __name__ == "__main__":
    args = sys.argv[3:]
    dtype = args.pop(0) if args and "=" not in args[0] else "float32"
    run(sys.argv[1], sys.argv[2], dtype, args)
    import torch.distributed as dist

    if dist.is_initialized():  # gloo's threads stopped before the interpreter exits (else a rare abort there)
        dist.destroy_process_group()
