"""arrol (online rollout pruning) against GRPO at equal completions generated, on a task where the
first tokens settle success (configs/arrol_tiny.yaml: counting, `<answer>N</answer>`, N is token 4).

    python benchmarks/learning/arrol.py [--seeds 0,1,2] [--steps 30] [--eval-every 10]
        [--methods grpo_g8,arrol,grpo_g4] [--out benchmarks/results/arrol.json] [overrides ...]
    python benchmarks/learning/arrol.py --table benchmarks/results/arrol.json

One warm start (the config's, seed 0, a 1-step run's `warm_start/`, reused when there) is shared by
every method and seed. Per step every method draws rollout.prompts_per_step = 8 prompts:
- grpo_g8: GRPO, 8 completions per prompt, all finished and trained on (64 generated);
- arrol: 8 rows per prompt generated to the prefix (over_generation 2 x group_size 4), 4 survive,
  finish and are trained on (64 generated, 32 trained);
- grpo_g4: GRPO with 4 completions per prompt (32 generated and trained): equal completions trained;
- arrol_p<P>: arrol with sample_efficiency.arrol.prefix_tokens=P (the head's AUROC by prefix length).
Per run: held-out greedy accuracy before/after, tokens sampled per step (arrol: prefixes + survivors'
continuations), median s/step and s of generation per step, the survivors' all-equal share, the mean
reward, and for arrol the head's AUROC, pooled and within groups (means over steps where defined), and the
share of steps it chose.
Single-threaded CPU; times are of a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import table  # noqa: E402

from mmrlvr.config import load_config  # noqa: E402
from mmrlvr.recipe.loop import train  # noqa: E402

A = "sample_efficiency.arrol"
CONFIG = "configs/arrol_tiny.yaml"


def method_overrides(method: str) -> list[str]:
    if method == "grpo_g8":
        return [f"{A}.enabled=false", "rollout.group_size=8"]
    if method == "grpo_g4":
        return [f"{A}.enabled=false", "rollout.group_size=4"]
    if method == "arrol":
        return [f"{A}.enabled=true", "rollout.group_size=4"]
    if method.startswith("arrol_p") and method[7:].isdigit():
        return [f"{A}.enabled=true", "rollout.group_size=4", f"{A}.prefix_tokens={int(method[7:])}"]
    raise SystemExit(f"unknown method {method!r}: grpo_g8, grpo_g4, arrol, arrol_p<P>")


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.mean(xs) if xs else float("nan")


def one(method: str, seed: int, warm: Path, work: Path, args) -> dict:
    run = work / f"{method}_s{seed}"
    t0 = time.perf_counter()
    summary = train(load_config(CONFIG, [f"seed={seed}", "train.resume=false", *args.overrides, *method_overrides(method),
                                         f"output_dir={run}", f"train.steps={args.steps}",
                                         f"train.eval_every={args.eval_every}", f"warm_start.checkpoint={warm}",
                                         "train.save_every=0"]))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "time/step" in r]
    cfg = load_config(run / "config.yaml")
    n = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    trained = [r["rollout/mean_length"] * n for r in steps]
    arrol = cfg.sample_efficiency.arrol.enabled
    return {
        "method": method, "seed": seed, "acc_before": summary["eval_before"]["accuracy"],
        "acc_after": summary["eval_after"]["accuracy"],
        "tokens_generated": _mean(r["arrol/tokens_generated"] for r in steps) if arrol else _mean(trained),
        "tokens_trained": _mean(trained),
        "s_per_step": statistics.median(r["time/step"] for r in steps),
        "gen_s_per_step": statistics.median(r["time/rollout"] for r in steps),
        "all_equal": _mean(r["arrol/all_equal_groups"] for r in steps) if arrol
        else 1 - _mean(r["rollout/mixed_group_frac"] for r in steps),
        "reward": _mean(r["reward/mean"] for r in steps),
        "head_auroc": _mean(r.get("arrol/head_auroc") for r in steps) if arrol else None,
        "head_auroc_within": _mean(r.get("arrol/head_auroc_within") for r in steps) if arrol else None,
        "head_trusted": _mean(r.get("arrol/head_trusted") for r in steps) if arrol else None,
        "survivor_pos_share": _mean(r.get("arrol/survivor_pos_share") for r in steps) if arrol else None,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


COLUMNS = [("method", "method", ""), ("seeds", "seeds", "d"), ("acc_before", "acc before", ".3f"),
           ("acc_after", "acc after", ".3f"), ("acc_after_sd", "sd", ".3f"),
           ("tokens_generated", "tokens sampled/step", ".0f"), ("tokens_trained", "tokens trained/step", ".0f"),
           ("s_per_step", "s/step", ".2f"), ("gen_s_per_step", "gen s/step", ".2f"), ("all_equal", "all-equal", ".2f"),
           ("reward", "reward", ".3f"), ("head_auroc", "head AUROC", ".3f"), ("head_auroc_within", "within groups", ".3f"),
           ("head_trusted", "head chose", ".2f")]


def mean_rows(runs: list[dict]) -> list[dict]:
    out = []
    for method in dict.fromkeys(r["method"] for r in runs):
        rs = [r for r in runs if r["method"] == method]
        row = {"method": method, "seeds": len(rs)}
        for k, _, _ in COLUMNS[2:]:
            if k == "acc_after_sd":
                row[k] = statistics.stdev(r["acc_after"] for r in rs) if len(rs) > 1 else 0.0
            else:
                vals = [r[k] for r in rs if r.get(k) is not None]
                row[k] = _mean(vals) if vals else "-"
        out.append(row)
    return out


def main() -> int:
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--methods", default="grpo_g8,arrol,grpo_g4")
    ap.add_argument("--out", default="benchmarks/results/arrol.json")
    ap.add_argument("--work", default="runs/bench_arrol")
    ap.add_argument("--table", help="only print the table of these result JSONs (comma-separated)")
    ap.add_argument("overrides", nargs="*", help="config overrides applied to every run (key=value)")
    args = ap.parse_args()
    if args.table:
        runs = list({(r["method"], r["seed"]): r for f in args.table.split(",")
                     for r in json.loads(Path(f).read_text())["runs"]}.values())
        print(table(mean_rows(runs), COLUMNS))
        return 0
    methods = args.methods.split(",")
    for m in methods:
        method_overrides(m)  # an unknown method fails before anything runs
    work, out = Path(args.work), Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    warm_run = work / "warm_s0"
    if not (warm_run / "warm_start" / "warm_start.json").exists():  # one RL step only, to get the warm start
        train(load_config(CONFIG, ["seed=0", "train.resume=false", *args.overrides, f"output_dir={warm_run}",
                                   "train.steps=1", "train.save_every=0", f"{A}.enabled=false"]))
    settings = {"config": CONFIG, "seeds": args.seeds, "steps": args.steps, "eval_every": args.eval_every,
                "methods": methods, "overrides": args.overrides}
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for method in methods:
            runs.append(one(method, seed, warm_run / "warm_start", work, args))
            out.write_text(json.dumps({"settings": settings, "runs": runs}, indent=1))  # kept if cut short
    print(table(mean_rows(runs), COLUMNS))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
