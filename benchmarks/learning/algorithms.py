"""Train the quickstart task with every algorithm preset from the same warm start and seed.

    python benchmarks/learning/algorithms.py [--steps 60] [--eval-every 10] [--target 0.95]

Prints a table (preset, held-out accuracy after the budget, steps to reach the target accuracy,
s/step, share of groups with mixed rewards early and late) and writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from mmrlvr.algos.presets import PRESETS
from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _first_step_at(rows: list[dict], key: str, target: float, before: float) -> int | None:
    if before >= target:
        return 0
    hits = [r["step"] for r in rows if key in r and r[key] >= target]
    return min(hits) if hits else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.yaml")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/algorithms.json")
    ap.add_argument("--work", default="runs/bench_algorithms")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    work = Path(args.work)
    common = [f"seed={args.seed}", "train.resume=false", *args.overrides]

    # one warm start shared by every preset
    warm_run = work / "warm"
    train(load_config(args.config, common + [f"output_dir={warm_run}", "train.steps=0"]))
    warm = warm_run / "warm_start"

    results = []
    for preset in args.presets.split(","):
        run = work / preset
        t0 = time.perf_counter()
        summary = train(load_config(args.config, common + [
            f"output_dir={run}", f"algo.algorithm={preset}", f"train.steps={args.steps}",
            f"train.eval_every={args.eval_every}", f"warm_start.checkpoint={warm}", "train.save_every=0",
        ]))
        rows = _rows(run)
        steps = [r for r in rows if "time/step" in r]
        mixed = [r["rollout/mixed_group_frac"] for r in steps]
        k = max(1, len(mixed) // 6)
        key = next((x for r in rows for x in r if x.startswith("eval/")), "eval/counting/accuracy")
        results.append({
            "preset": preset,
            "accuracy_before": summary["eval_before"]["accuracy"],
            "accuracy_after": summary["eval_after"]["accuracy"],
            "steps_to_target": _first_step_at(rows, key, args.target, summary["eval_before"]["accuracy"]),
            "s_per_step": statistics.median(r["time/step"] for r in steps),
            "mixed_group_frac_first": sum(mixed[:k]) / k,
            "mixed_group_frac_last": sum(mixed[-k:]) / k,
            "wall_s": round(time.perf_counter() - t0, 1),
        })

    header = f"{'preset':13s} {'acc before':>10s} {'acc after':>9s} {'steps to ' + str(args.target):>14s} {'s/step':>7s} {'mixed first':>11s} {'mixed last':>10s}"
    print(header)
    print("-" * len(header))
    for r in results:
        reach = "-" if r["steps_to_target"] is None else str(r["steps_to_target"])
        print(f"{r['preset']:13s} {r['accuracy_before']:10.3f} {r['accuracy_after']:9.3f} {reach:>14s} "
              f"{r['s_per_step']:7.2f} {r['mixed_group_frac_first']:11.2f} {r['mixed_group_frac_last']:10.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"steps": args.steps, "eval_every": args.eval_every, "target": args.target, "seed": args.seed,
            "config": args.config, "overrides": args.overrides, "python": sys.version.split()[0]}
    out.write_text(json.dumps({"settings": meta, "results": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
