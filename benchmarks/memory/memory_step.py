"""Peak host memory of one RL update at a realistic vocabulary, this checkout vs an older commit.

The model is the embedded tiny Qwen2.5-VL with its output layer (and embedding) widened to
Qwen's 151,936 entries, so every logit tensor is as wide as a real checkpoint's while the rest
stays tiny. One `update` (old-policy and reference log-probs when the preset needs them, then
the training forward/backward) runs on a fixed rollout batch of counting prompts with random
completions; a sampling thread reads the process's resident memory (VmRSS) every 2 ms and the
table reports the peak above the resident memory just before the update. Each measurement is
its own process. "before" imports mmrlvr from a temporary `git worktree` of `--before` (default:
the commit before the multi-update presets and micro-batched no-grad forwards).

    python benchmarks/memory/memory_step.py --before 4a794bc
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

VOCAB = 151_936
CASES = {
    # name: (algorithm, overrides)
    "grpo": ("grpo", []),
    "reinforce_pp, 2 mini-batches x 2 micro": ("reinforce_pp", ["algo.mini_batches=2", "algo.grad_accum=2"]),
}


def child(case: str, prompts: int, group: int, tokens: int) -> dict:
    import copy
    import dataclasses

    import torch

    torch.set_num_threads(1)
    from accelerate import Accelerator
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.data.collate import encode_prompts, repeat_prompts
    from mmrlvr.models.tiny import build_tiny, tiny_config
    try:  # the learner owns the update; older checkouts had a module-level update()
        from mmrlvr.train.learner import Learner
        from mmrlvr.recipe.step import advantages_for

        def update(model, ref, optimizer, accelerator, batch, cfg, algo, suppress, seed):
            cfg = dataclasses.replace(cfg, algo=algo)
            learner = Learner(cfg, model, optimizer, accelerator, suppress, ref_model=ref)
            return learner.update(batch, advantages_for(batch, cfg), seed=seed)
    except ImportError:
        from mmrlvr.recipe.step import update
    from mmrlvr.types import RolloutBatch

    try:
        from mmrlvr.tasks import load_task
    except ImportError:  # older checkouts
        from tasks import load_task

    work = Path(tempfile.mkdtemp(prefix="memstep-"))
    processor = AutoProcessor.from_pretrained(build_tiny(work / "tiny", seed=0))
    config = tiny_config(processor.tokenizer)
    config.text_config.vocab_size = VOCAB
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).train()
    algorithm, overrides = CASES[case]
    cfg = load_config(None, [f"algo.algorithm={algorithm}", f"rollout.prompts_per_step={prompts}",
                             f"rollout.group_size={group}", f"rollout.max_new_tokens={tokens}", *overrides])
    algo = resolve_algo(cfg.algo, tokens)
    samples = load_task("counting", "train", prompts, 0)
    n = prompts * group
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(20, len(processor.tokenizer) - 20, (n, tokens), generator=gen)
    batch = RolloutBatch(samples, repeat_prompts(encode_prompts(processor, samples), group), ids,
                         torch.ones(n, tokens, dtype=torch.long), torch.zeros(n, dtype=torch.bool),
                         torch.randint(0, 2, (prompts, group), generator=gen).float(), [""] * n, [None] * n, {})
    ref = copy.deepcopy(model).eval().requires_grad_(False) if algo.kl_coef > 0 else None
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    accelerator = Accelerator(cpu=True)
    torch.set_num_threads(1)
    from benchmarks.common import rss_peak

    with rss_peak() as mem:
        update(model, ref, optimizer, accelerator, batch, cfg, algo, [], seed=0)
    full_logits_mb = n * (tokens + 1) * VOCAB * 4 / 2**20
    import mmrlvr

    return {"case": case, "mmrlvr": str(Path(mmrlvr.__file__).parent), "rows": n, "tokens": tokens, "vocab": VOCAB, "baseline_mb": round(mem["base_mb"]),
            "peak_above_baseline_mb": round(mem["above_mb"]), "update_s": round(mem["seconds"], 1),
            "one_fp32_logits_copy_mb": round(full_logits_mb)}


def run_child(code: Path, case: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--child", case, "--prompts", str(args.prompts), "--group", str(args.group),
           "--tokens", str(args.tokens)]
    out = subprocess.run(cmd, env=env, cwd=code, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="4a794bc", help="commit to compare against")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.prompts, args.group, args.tokens)))
        return
    root = Path(__file__).resolve().parents[2]
    old = Path(tempfile.mkdtemp(prefix="memstep-before-")) / "code"
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(old), args.before], check=True,
                   capture_output=True)
    rows = []
    try:
        for case in CASES:
            for label, code in (("before", old), ("after", root)):
                row = {"code": label if label == "after" else f"before ({args.before})", **run_child(code, case, args)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(old)], check=False)
    from benchmarks.common import table

    print(table(rows, [("case", "case", ""), ("code", "code", ""), ("rows", "rows", "d"), ("tokens", "T", "d"),
                       ("one_fp32_logits_copy_mb", "1 fp32 logits copy (MB)", "d"),
                       ("peak_above_baseline_mb", "peak RSS above baseline (MB)", "d"), ("update_s", "s", ".1f")]))
    out = root / "benchmarks" / "results" / "memory_step.json"
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
