"""HiLL against GRPO at equal completions generated, from one warm start per seed.

    python benchmarks/learning/hill.py [--seeds 0,1,2] [--steps 20] [--config configs/hill_tiny.yaml]

Per seed: one warm start; HiLL (`rollout.episode=hill`) trains `--steps` RL steps and counts every
sequence it generates (reasoner answers, hints and hinted re-rollouts: `hill/generated`); GRPO
(`rollout.episode=single`) then trains for as many steps as that count buys at
prompts_per_step x group_size completions per step. Prints held-out accuracy before and after
for both arms and writes JSON (benchmarks/results/hill.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _arm(config: str, common: list, run: Path, extra: list) -> tuple[dict, list, float]:
    t0 = time.perf_counter()
    summary = train(load_config(config, common + [f"output_dir={run}", "train.log_every=1", "train.eval_every=0",
                                                  "train.save_every=0", *extra]))
    return summary, _rows(run), round(time.perf_counter() - t0, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/hill_tiny.yaml")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="benchmarks/results/hill.json")
    ap.add_argument("--work", default="runs/bench_hill")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    work = Path(args.work)
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        common = [f"seed={seed}", "train.resume=false", *args.overrides]
        warm_run = work / f"warm_s{seed}"
        if not (warm_run / "warm_start" / "config.json").exists():  # a 1-step run's warm start, shared by both arms
            train(load_config(args.config, common + [f"output_dir={warm_run}", "train.steps=1", "train.eval_every=0",
                                                     "rollout.episode=single", "rollout.episode_args={}"]))
        warm = [f"warm_start.checkpoint={warm_run / 'warm_start'}"]
        cfg = load_config(args.config, common)
        per_step = cfg.rollout.prompts_per_step * cfg.rollout.group_size
        hill, hill_rows, hill_s = _arm(args.config, common, work / f"hill_s{seed}", [*warm, f"train.steps={args.steps}"])
        steps = [r for r in hill_rows if "hill/generated" in r]
        generated = int(sum(r["hill/generated"] for r in steps))
        grpo_steps = max(1, round(generated / per_step))
        grpo, grpo_rows, grpo_s = _arm(args.config, common, work / f"grpo_s{seed}",
                                       [*warm, f"train.steps={grpo_steps}", "rollout.episode=single", "rollout.episode_args={}"])
        results.append({
            "seed": seed,
            "hill_steps": args.steps, "hill_generated": generated,
            "grpo_steps": grpo_steps, "grpo_generated": grpo_steps * per_step,
            "before": hill["eval_before"]["accuracy"],
            "hill_after": hill["eval_after"]["accuracy"], "grpo_after": grpo["eval_after"]["accuracy"],
            "hill_hard_frac": statistics.mean(r["hill/hard_frac"] for r in steps),
            "hill_replaced_frac": statistics.mean(r.get("hill/replaced_frac", 0.0) for r in steps),
            "hill_gate_pass_frac": statistics.mean(r["hill/gate_pass_frac"] for r in steps if "hill/gate_pass_frac" in r)
            if any("hill/gate_pass_frac" in r for r in steps) else None,
            "hill_hinted_pass_rate": statistics.mean(r["hill/hinted_pass_rate"] for r in steps if "hill/hinted_pass_rate" in r)
            if any("hill/hinted_pass_rate" in r for r in steps) else None,
            "hinter_reward_mean": statistics.mean(r["reward/hinter/mean"] for r in steps if "reward/hinter/mean" in r)
            if any("reward/hinter/mean" in r for r in steps) else None,
            "hill_wall_s": hill_s, "grpo_wall_s": grpo_s,
        })
        print(json.dumps(results[-1]), flush=True)
    print(f"{'seed':>4s} {'before':>6s} {'HiLL after':>10s} {'GRPO after':>10s} {'generated':>9s} {'GRPO steps':>10s} "
          f"{'replaced':>8s}")
    for r in results:
        print(f"{r['seed']:4d} {r['before']:6.3f} {r['hill_after']:10.3f} {r['grpo_after']:10.3f} "
              f"{r['hill_generated']:9d} {r['grpo_steps']:10d} {r['hill_replaced_frac']:8.3f}")
    for arm in ("hill_after", "grpo_after"):
        xs = [r[arm] for r in results]
        print(f"{arm}: mean {statistics.mean(xs):.3f}, min {min(xs):.3f}, max {max(xs):.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"config": args.config, "steps": args.steps, "seeds": args.seeds, "overrides": args.overrides,
            "python": sys.version.split()[0]}
    out.write_text(json.dumps({"settings": meta, "results": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
