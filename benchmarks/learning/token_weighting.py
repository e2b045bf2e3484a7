"""Token weighting methods from one warm start on the harder perception task, 3 seeds each.

    python benchmarks/learning/token_weighting.py [--config configs/marked_cell.yaml] [--steps 30] [--seeds 0,1,2]
    python benchmarks/learning/token_weighting.py --config configs/cell_tally_tiny.yaml   # the chain-of-thought task
    # or one process per seed (after one has trained the shared warm start), then
    python benchmarks/learning/token_weighting.py --combine part0.json part1.json part2.json --out result.json

Prints a table (method, held-out accuracy before and after the step budget as mean +- spread over
seeds, gain, s/step and its ratio to `none`, time spent on token signals, completion tokens
sampled per step (every run samples the same completions per step), the share of
image-dependent tokens where the method measures it) and writes it as JSON.
The warm start is trained once and reused by every run; each run differs only in
`token_weighting.method` and the seed of its RL phase (sampling, data order, eval boards).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import table  # noqa: E402

from mmrlvr.algos.token_weights import METHODS  # noqa: E402
from mmrlvr.config import load_config  # noqa: E402
from mmrlvr.recipe.loop import train  # noqa: E402


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _spread(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/marked_cell.yaml")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default="none,entropy_topk,vppo,pepo,tor,kawhi")
    ap.add_argument("--work", default="runs/bench_token_weighting")
    ap.add_argument("--out", default="benchmarks/results/token_weighting.json")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="no training: merge the runs of earlier result files (e.g. one per seed, run "
                         "as parallel processes after the warm start exists) into one table at --out")
    args = ap.parse_args()
    if args.combine:
        parts = [json.loads(Path(f).read_text()) for f in args.combine]
        if len({(p["config"], p["steps"], tuple(p["overrides"])) for p in parts}) != 1:
            raise SystemExit("--combine: the files differ in config, steps or overrides")
        _report(parts[0]["config"], parts[0]["steps"], parts[0]["overrides"], [r for p in parts for r in p["runs"]],
                Path(args.out))
        return 0
    work = Path(args.work)
    methods = args.methods.split(",")
    for m in methods:
        METHODS.get(m)  # fail before any training on a typo
    seeds = [int(s) for s in args.seeds.split(",")]

    warm = work / "warm" / "warm_start"
    if not (warm / "warm_start.json").exists():  # trained once (seed 0), then reused
        # one RL step is the least a run may take; the saved warm start is from before it
        train(load_config(args.config, ["seed=0", f"output_dir={work / 'warm'}", "train.steps=1",
                                        "train.resume=false", "verifier_workers=0", *args.overrides]))
    rollout = load_config(args.config, list(args.overrides)).rollout
    completions = rollout.prompts_per_step * rollout.group_size
    runs = []
    for seed in seeds:
        for method in methods:  # methods interleaved per seed, so machine load hits all alike
            run = work / f"{method}_s{seed}"
            t0 = time.perf_counter()
            summary = train(load_config(args.config, [
                f"seed={seed}", f"output_dir={run}", f"token_weighting.method={method}", f"train.steps={args.steps}",
                f"warm_start.checkpoint={warm}", "train.save_every=0", "train.eval_every=0", "train.resume=false",
                "token_weighting.diagnostics=false", "verifier_workers=0", *args.overrides,
            ]))
            rows = [r for r in _rows(run) if "time/step" in r and r["step"] > 1]  # step 1 warms up
            runs.append({
                "method": method, "seed": seed, "acc_before": summary["eval_before"]["accuracy"],
                "acc_after": summary["eval_after"]["accuracy"],
                "s_per_step": statistics.mean(r["time/step"] for r in rows),
                "signals_s": statistics.mean(r.get("time/token_signals", 0.0) for r in rows),
                # completion tokens sampled per step: the completions are equal (prompts x group), the tokens not
                "tokens_per_step": statistics.mean(r["rollout/mean_length"] for r in rows) * completions,
                # share of completion tokens whose probability depends on the image (methods that
                # compute visual dependency; None for the others)
                "dependent_frac": (statistics.mean(d) if (d := [r["tokens/dependent_frac"] for r in rows
                                                               if "tokens/dependent_frac" in r]) else None),
                "wall_s": round(time.perf_counter() - t0, 1),
            })
            print(json.dumps(runs[-1]), flush=True)

    _report(args.config, args.steps, args.overrides, runs, Path(args.out))
    return 0


def _report(config: str, steps: int, overrides: list[str], runs: list[dict], out: Path) -> None:
    """The table over every run (mean and sd over seeds per method), printed and written as JSON."""
    methods = list(dict.fromkeys(r["method"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    base_step = statistics.mean(r["s_per_step"] for r in runs if r["method"] == "none") if "none" in methods else None
    results = []
    for method in methods:
        rs = [r for r in runs if r["method"] == method]
        after = [r["acc_after"] for r in rs]
        gains = [r["acc_after"] - r["acc_before"] for r in rs]
        step = statistics.mean(r["s_per_step"] for r in rs)
        results.append({
            "method": method, "seeds": len(rs), "acc_before": statistics.mean(r["acc_before"] for r in rs),
            "acc_after": statistics.mean(after), "acc_after_sd": _spread(after),
            "gain": statistics.mean(gains), "gain_sd": _spread(gains), "s_per_step": step,
            "step_vs_none": step / base_step if base_step else None,
            "signals_s": statistics.mean(r["signals_s"] for r in rs),
            "tokens_per_step": (statistics.mean(r["tokens_per_step"] for r in rs)
                                if all(r.get("tokens_per_step") is not None for r in rs) else None),
            "dependent_frac": (statistics.mean(d) if (d := [r["dependent_frac"] for r in rs
                                                           if r.get("dependent_frac") is not None]) else None),
        })
    print(table(results, [
        ("method", "method", ""), ("seeds", "seeds", "d"), ("acc_before", "acc. before", ".3f"),
        ("acc_after", "acc. after", ".3f"), ("acc_after_sd", "sd", ".3f"), ("gain", "gain", "+.3f"),
        ("gain_sd", "sd", ".3f"), ("s_per_step", "s/step", ".2f"), ("step_vs_none", "vs none", ".2f"),
        ("signals_s", "signals s/step", ".2f"), ("tokens_per_step", "tokens/step", ".0f"), ("dependent_frac", "image-dep. tokens", ".3f"),
    ]))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": config, "steps": steps, "seeds": seeds, "overrides": overrides,
                               "results": results, "runs": runs}, indent=1))

if __name__ == "__main__":
    sys.exit(main())
