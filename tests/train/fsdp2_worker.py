"""A few AdamW steps of the tiny model sharded with FSDP2 (`fully_shard`, gloo, CPU), with
mmrlvr's checkpoints, under `torchrun`; resumes from the newest checkpoint with `resume`.

accelerate 1.15 never selects FSDP on CPU (`AcceleratorState` takes its FSDP branch only for GPU-
like distributed types; with `use_cpu` a `distributed_type: FSDP` config runs as MULTI_CPU, i.e.
DDP), so the model is sharded here exactly as accelerate's `fsdp2_prepare_model` does: one
`fully_shard` unit per module named in `_no_split_modules`, then the root.

    torchrun --nproc_per_node 2 tests/train/fsdp2_worker.py <tiny_dir> <run_dir> <steps> [resume]
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from PIL import Image


def shard_fsdp2(model) -> None:
    from torch.distributed.fsdp import fully_shard

    names = set(model._no_split_modules)
    for module in model.modules():
        if type(module).__name__ in names:
            fully_shard(module, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)


def inputs(processor, rank: int, step: int) -> dict:
    """A different image prompt per rank and step (every rank runs the vision tower)."""
    from mmrlvr.data.collate import encode_prompts, model_kwargs
    from mmrlvr.types import Sample

    colour = (40 * step % 255, 200 - 50 * rank, 30 + 60 * rank)
    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Count {rank} {step}."}]},)
    enc = encode_prompts(processor, [Sample(f"s{rank}-{step}", msg, 0, images=(Image.new("RGB", (56, 56), colour),))])
    return model_kwargs(enc)


def main(tiny_dir: str, run_dir: str, steps: int, resume: bool) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from mmrlvr.models.load import load_policy
    from mmrlvr.train.checkpoint import latest_checkpoint, load_trainer_state, save_checkpoint

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # a stuck rank fails, not hangs
    rank = dist.get_rank()
    ckpt = latest_checkpoint(run_dir) if resume else None
    torch.manual_seed(0)
    model, processor = load_policy(str(ckpt or tiny_dir))  # every rank loads the full weights
    shard_fsdp2(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    state = {"step": 0, "data_pos": 0}
    if ckpt is not None:
        state = load_trainer_state(ckpt, optimizer)
    start = state["step"]
    model.train()
    for step in range(start + 1, steps + 1):
        batch = inputs(processor, rank, step)
        loss = model(**batch, labels=batch["input_ids"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        state.update(step=step, data_pos=2 * step)
        save_checkpoint(run_dir, step, model, processor, optimizer, state)
    # the weights the shards hold, gathered by torch (not by mmrlvr), and the sharded model's
    # log-probs on a fixed prompt: what a one-process load of the checkpoint must reproduce
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    model.eval()
    with torch.no_grad():
        probe = inputs(processor, 0, 0)
        logp = torch.log_softmax(model(**probe).logits.float(), -1)
    if rank == 0:
        torch.save({"weights": full, "logp": logp}, Path(run_dir) / "gathered.pt")
        (Path(run_dir) / "worker.json").write_text(json.dumps(
            {"started_at": start, "world": dist.get_world_size(),
             "sharded": type(next(model.parameters())).__name__}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), len(sys.argv) > 4 and sys.argv[4] == "resume")
