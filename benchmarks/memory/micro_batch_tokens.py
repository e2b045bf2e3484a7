"""Peak host memory of one RL update as the batch grows, with and without `train.micro_batch_tokens`.

The model is the embedded tiny Qwen2.5-VL widened to a 256-wide, 4-layer language model (random
weights, built in the process, nothing downloaded), so that the update's activations, not the
interpreter, make the peak. One `Learner.update` (grpo) runs on a fixed rollout batch of counting
prompts (image + question, 48 prompt tokens) with random completions of mixed lengths (8 to
`--tokens`), for `--prompts` prompts x each `--groups` group size. A sampling thread reads the
process's resident memory (VmRSS) every 2 ms (`common.rss_peak`); the table reports the peak above
the resident memory just before the update. Each measurement is its own process, run with
`MALLOC_MMAP_THRESHOLD_=65536`: glibc then maps every tensor above 64 KiB on its own and unmaps it
when freed, so the resident memory follows the live tensors (with its default, growing threshold
a freed micro-batch's memory stays in the heap and the next one's lands beside it).

Without a budget the update is one micro-batch of every row (`algo.grad_accum` 1): its peak grows
with prompts x group size. With a budget every forward computes at most that many tokens, so once
the batch is larger than one budget the peak stays where one budget's micro-batch puts it, and
only the number of micro-batches grows.

    python benchmarks/memory/micro_batch_tokens.py                       # about 3 minutes on 2 cores
    python benchmarks/memory/micro_batch_tokens.py --groups 4 8 16 --budget 1024
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HIDDEN, LAYERS = 256, 4


def child(rows_per_prompt: int, prompts: int, tokens: int, budget: int | None) -> dict:
    """One update of `prompts` x `rows_per_prompt` rows, measured; returns what the table shows."""
    import torch

    torch.set_num_threads(1)
    from accelerate import Accelerator
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from mmrlvr.checks.resolve import resolve_config
    from mmrlvr.config import load_config
    from mmrlvr.data.collate import encode_prompts, repeat_prompts
    from mmrlvr.models.tiny import build_tiny, tiny_config
    from mmrlvr.tasks import load_task
    from mmrlvr.train.learner import Learner
    from mmrlvr.recipe.step import advantages_for
    from mmrlvr.types import RolloutBatch

    work = Path(tempfile.mkdtemp(prefix="mbt-"))
    processor = AutoProcessor.from_pretrained(build_tiny(work / "tiny", seed=0))
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(tiny_config(processor.tokenizer, hidden=HIDDEN, layers=LAYERS)).train()
    over = [f"rollout.prompts_per_step={prompts}", f"rollout.group_size={rows_per_prompt}",
            f"rollout.max_new_tokens={tokens}", "train.max_grad_norm=1e9"]
    if budget is not None:
        over.append(f"train.micro_batch_tokens={budget}")
    cfg = resolve_config(load_config(None, over))
    samples = load_task("counting", "train", prompts, 0)
    n = prompts * rows_per_prompt
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(20, len(processor.tokenizer) - 20, (n, tokens), generator=gen)
    lengths = torch.randint(8, tokens + 1, (n,), generator=gen)
    mask = (torch.arange(tokens)[None] < lengths[:, None]).long()
    rewards = torch.randint(0, 2, (prompts, rows_per_prompt), generator=gen).float()
    rewards[:, 0], rewards[:, 1] = 1.0, 0.0  # every group carries signal: every row is in the update
    batch = RolloutBatch(samples, repeat_prompts(encode_prompts(processor, samples), rows_per_prompt), ids, mask,
                         torch.zeros(n, dtype=torch.bool), rewards, [""] * n, [None] * n, {})
    learner = Learner(cfg, model, torch.optim.SGD(model.parameters(), lr=1e-3), Accelerator(cpu=True), [])
    adv = advantages_for(batch, cfg)
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script
    from benchmarks.common import rss_peak

    with rss_peak() as mem:
        stats = learner.update(batch, adv, seed=0)
    return {"budget": budget if budget is not None else "none", "rows": n, "tokens": tokens,
            "valid_tokens": int(mask.sum()) + int(batch.prompt_inputs["attention_mask"].sum()),
            "micro_batches": int(stats["train/micro_batches"]), "padding_waste": round(stats["train/padding_waste"], 3),
            "peak_above_baseline_mb": round(mem["above_mb"]), "update_s": round(mem["seconds"], 1)}


def run_child(rows_per_prompt: int, args, budget: int | None) -> dict:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    cmd = [sys.executable, __file__, "--child", str(rows_per_prompt), "--prompts", str(args.prompts),
           "--tokens", str(args.tokens), *(["--budget", str(budget)] if budget is not None else [])]
    out = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 16, 32, 64], help="group sizes to measure")
    parser.add_argument("--tokens", type=int, default=64, help="longest completion")
    parser.add_argument("--budget", type=int, default=None, help="train.micro_batch_tokens of the budget runs (512)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.prompts, args.tokens, args.budget)))
        return
    rows = []
    for budget in (None, args.budget or 512):
        for g in args.groups:
            row = run_child(g, args, budget)
            rows.append(row)
            print(json.dumps(row), flush=True)
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script
    from benchmarks.common import table

    print(table(rows, [("budget", "micro_batch_tokens", ""), ("rows", "rows", "d"), ("valid_tokens", "prompt+completion tokens", "d"),
                       ("micro_batches", "micro-batches", "d"), ("padding_waste", "computed/valid", ".3f"),
                       ("peak_above_baseline_mb", "peak RSS above baseline (MB)", "d"), ("update_s", "s", ".1f")]))
    out = Path(__file__).resolve().parents[1] / "results" / "micro_batch_tokens.json"
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
