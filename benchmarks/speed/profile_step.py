"""Where one mmrlvr RL step spends its time: phase split and the top torch operators.

    python benchmarks/speed/profile_step.py [--steps 5]

Runs a few quickstart RL steps from the shared warm start (16 prompts x 8 samples), then profiles
one more step with torch.profiler. Prints the phase table (rollout, scoring, update) and the ten
operators with the most CPU time, and writes both as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default="benchmarks/results/profile_step.json")
    args = ap.parse_args()
    from benchmarks.common import table, warm_start_dir

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.setup import set_threads_and_seed
    import dataclasses

    from mmrlvr.train.learner import Learner
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import advantages_for, collect
    from mmrlvr.verifiers.score import make_scorer
    from mmrlvr.tasks import load_task

    warm = warm_start_dir(Path(args.work))
    cfg = load_config("configs/quickstart.yaml", [f"warm_start.checkpoint={warm}"])
    accelerator = set_threads_and_seed(cfg)
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens, cfg.rollout.engine))
    model, processor = load_policy(str(warm))
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    engine = HFRolloutEngine(model, processor)
    scorer = make_scorer(cfg.verifier_timeout, cfg.verifier_workers)
    stream = SeededStream(load_task("counting", "train", cfg.task.train_size, cfg.seed), cfg.seed)
    phases = []
    for step in range(args.steps + 1):
        import time

        t0 = time.perf_counter()
        model.eval()
        batch = collect(engine, stream, scorer, cfg, seed=step)
        model.train()
        t1 = time.perf_counter()
        learner = Learner(cfg, model, optimizer, accelerator, engine.suppress_ids)
        stats = learner.update(batch, advantages_for(batch, cfg), seed=step)
        t2 = time.perf_counter()
        if step:
            phases.append({"rollout": batch.metrics["time/rollout"], "score": batch.metrics["time/score"],
                           "update": t2 - t1, "step": t2 - t0, "updated_frac": stats["actor/updated_seqs_frac"]})
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model.eval()
        batch = collect(engine, stream, scorer, cfg, seed=99)
        model.train()
        learner.update(batch, advantages_for(batch, cfg), seed=99)
    scorer.close()
    med = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
    rows = [{"phase": k, "seconds": med[k], "share": med[k] / med["step"]} for k in ("rollout", "score", "update")]
    rows.append({"phase": "step (total)", "seconds": med["step"], "share": 1.0})
    print(table(rows, [("phase", "phase", ""), ("seconds", "median s", ".3f"), ("share", "share", ".2f")]))
    print(f"sequences in the update forward: {med['updated_frac']:.2f} of the batch (zero-advantage groups skipped)")
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    op_rows = [{"op": e.key, "self_ms": e.self_cpu_time_total / 1000, "share": e.self_cpu_time_total / total, "calls": e.count} for e in ops]
    print(table(op_rows, [("op", "operator", ""), ("self_ms", "self CPU ms", ".1f"), ("share", "share", ".2f"), ("calls", "calls", "d")]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"phases": rows, "updated_frac": med["updated_frac"], "top_ops": op_rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
