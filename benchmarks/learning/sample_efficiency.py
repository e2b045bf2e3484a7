"""GRPO against prompt replay, DBB advantages, both, and demonstrations, at equal rollouts.

    python benchmarks/learning/sample_efficiency.py [--configs configs/chart_tiny.yaml,configs/grounding_tiny.yaml]
        [--seeds 0,1,2] [--steps 40] [--eval-every 10] [--target 0.6]
        [--methods grpo,replay,dbb,replay_dbb,demos] [--label NAME] [--warm DIR] [overrides ...]
    python benchmarks/learning/sample_efficiency.py --table results.json[,more.json]   # reprint saved runs

Per config and seed, one warm start (a 1-step run's `warm_start/`, reused when already there; or `--warm`,
one saved model for every seed, e.g. another task's warm start) is shared by every method, and each method
trains the same number of steps with the same `rollout.prompts_per_step` x `rollout.group_size`, so
all generate the same number of completions ("rollouts"; replays are regenerated, so they count).
Per run: held-out accuracy before and after (at equal rollouts), rollouts until the held-out
accuracy first reaches `--target` (read from the periodic `eval/<task>/<headline>` rows: accuracy,
mean_iou, ...; checked every `--eval-every` steps; "-" when never), the share of all-equal groups
(1 - rollout/mixed_group_frac, first sampling round of each step; over the run and over the first 5
steps), median s/step,
and for demos the mean share of prompts shown demonstrations (held-out accuracy is always measured
without them). The table gives the mean over seeds; the JSON keeps every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import table  # noqa: E402

from mmrlvr.config import load_config  # noqa: E402
from mmrlvr.recipe.loop import train  # noqa: E402

SE = "sample_efficiency"
METHODS = {
    "grpo": [],
    "replay": [f"{SE}.replay.enabled=true"],
    "dbb": [f"{SE}.dbb.enabled=true"],
    "replay_dbb": [f"{SE}.replay.enabled=true", f"{SE}.dbb.enabled=true"],
    "demos": [f"{SE}.demos.enabled=true"],
}


START_STEPS = 5  # "all-equal at the start": the mean over the first steps, before RL has moved much


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


def headline_names() -> set[str]:
    """Every headline metric a registered verifier declares (accuracy, mean_iou, box_f1, ...)."""
    from mmrlvr.verifiers.base import VERIFIERS, _load_builtin

    _load_builtin()
    return {h for _, fn in VERIFIERS.items() if (h := getattr(fn, "eval_metric", None))}


def headline_key(rows: list[dict], before: float, names: set[str] | None = None) -> str | None:
    """The `eval/<task>/<headline>` key of the periodic evaluations: the metric the summary's
    `accuracy` is (`accuracy` for pass/fail answers, `mean_iou` for grounding, ...). With several
    headline keys, the one whose step-0 value equals `before` (the summary's accuracy before RL)."""
    names = headline_names() if names is None else names
    first = next((r for r in rows if r.get("step") == 0 and any(k.startswith("eval/") for k in r)), {})
    keys = [k for k in first if k.startswith("eval/") and k.count("/") == 2 and k.rsplit("/", 1)[1] in names]
    same = [k for k in keys if abs(first[k] - before) < 1e-9]
    return (same or keys or [None])[0]


def eval_curve(rows: list[dict], key: str | None) -> list[list[float]]:
    """[[step, held-out score], ...] from the metrics rows, in step order (step 0 = before RL)."""
    if key is None:
        return []
    return sorted([r["step"], r[key]] for r in rows if key in r)


def rollouts_to_target(curve: list[list[float]], target: float, per_step: int) -> int | None:
    """Completions generated until the held-out score first reaches `target` (step x per_step;
    0 when it starts there), or None when no evaluation reached it."""
    return next((int(step) * per_step for step, score in curve if score >= target), None)


def _one(config: str, label: str, method: str, seed: int, warm: Path, work: Path, args, per_step: int) -> dict:
    run = work / f"{label}_{method}_s{seed}"
    t0 = time.perf_counter()
    summary = train(load_config(config, [
        f"seed={seed}", "train.resume=false", *args.overrides, *METHODS[method], f"output_dir={run}",
        "algo.algorithm=grpo", f"train.steps={args.steps}", f"train.eval_every={args.eval_every}",
        f"warm_start.checkpoint={warm}", "train.save_every=0",
    ]))
    rows = _rows(run)
    steps = [r for r in rows if "time/step" in r]
    before = summary["eval_before"]["accuracy"]
    curve = eval_curve(rows, headline_key(rows, before))
    return {
        "config": label, "method": method, "seed": seed,
        "acc_before": before, "acc_after": summary["eval_after"]["accuracy"],
        "rollouts": args.steps * per_step, "rollouts_to_target": rollouts_to_target(curve, args.target, per_step),
        "curve": curve,
        "all_equal_frac": 1 - statistics.mean(r["rollout/mixed_group_frac"] for r in steps),
        "all_equal_start": 1 - statistics.mean(r["rollout/mixed_group_frac"] for r in steps[:START_STEPS]),
        "s_per_step": statistics.median(r["time/step"] for r in steps),
        "replay_frac": statistics.mean(r.get("replay/frac", 0.0) for r in steps),
        "demos_frac": statistics.mean(r.get("demos/frac", 0.0) for r in steps),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _mean_rows(runs: list[dict]) -> list[dict]:
    out = []
    for cfg, method in dict.fromkeys((r["config"], r["method"]) for r in runs):
        rs = [r for r in runs if (r["config"], r["method"]) == (cfg, method)]
        measured = [r for r in rs if "rollouts_to_target" in r]  # saved rows may lack it (not measured)
        reached = [r["rollouts_to_target"] for r in measured if r["rollouts_to_target"] is not None]
        row = {"config": cfg, "method": method, "seeds": len(rs),
               "reached": f"{len(reached)}/{len(measured)}",
               "rollouts_to_target": statistics.mean(reached) if reached else "-"}
        for k in ("acc_before", "acc_after", "all_equal_start", "all_equal_frac", "s_per_step", "replay_frac",
                  "demos_frac"):
            vals = [r[k] for r in rs if k in r]  # results saved before a column existed lack it
            row[k] = statistics.mean(vals) if vals else "-"
        row["acc_after_sd"] = statistics.stdev(r["acc_after"] for r in rs) if len(rs) > 1 else 0.0
        out.append(row)
    return out


def markdown(runs: list[dict]) -> str:
    """The README's table: per-seed accuracy before -> after, mean gain in points (sd), rollouts to
    target (seeds that reached it), all-equal share at the start and over the run, median s/step."""
    head = ("| task | method | seeds | held-out before -> after, per seed | mean gain, points (sd) | "
            "rollouts to target (reached) | all-equal, first 5 steps | all-equal, run | s/step |")
    lines = [head, "|" + "---|" * 9]
    for row in _mean_rows(runs):
        rs = [r for r in runs if (r["config"], r["method"]) == (row["config"], row["method"])]
        gains = [100 * (r["acc_after"] - r["acc_before"]) for r in rs]
        sd = f" ({statistics.stdev(gains):.1f})" if len(gains) > 1 else ""
        reach = row["rollouts_to_target"]
        cells = [row["config"], row["method"], str(len(rs)),
                 " / ".join(f"{r['acc_before']:.3f}->{r['acc_after']:.3f}" for r in rs),
                 f"{statistics.mean(gains):+.1f}{sd}", f"{reach:.0f} ({row['reached']})" if reach != "-" else
                 f"- ({row['reached']})"]
        cells += [f"{row[k]:.2f}" if row[k] != "-" else "-"
                  for k in ("all_equal_start", "all_equal_frac", "s_per_step")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


COLUMNS = [("config", "config", ""), ("method", "method", ""), ("seeds", "seeds", "d"),
           ("acc_before", "acc before", ".3f"), ("acc_after", "acc after", ".3f"), ("acc_after_sd", "sd", ".3f"),
           ("rollouts_to_target", "rollouts to target", ".0f"), ("reached", "reached", ""),
           ("all_equal_start", "all-equal (first 5 steps)", ".2f"), ("all_equal_frac", "all-equal groups", ".2f"),
           ("s_per_step", "s/step", ".2f"), ("replay_frac", "replay frac", ".2f"), ("demos_frac", "demos frac", ".2f")]


def main() -> int:
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="configs/chart_tiny.yaml,configs/grounding_tiny.yaml")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.6)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--label", help="name of the setting in the table, JSON and run folders (one config only; "
                                    "default: the config's file name)")
    ap.add_argument("--warm", help="start every method and seed from this warm-started model (a folder, e.g. "
                                   "another task's warm start) instead of the config's own warm start")
    ap.add_argument("--out", default="benchmarks/results/sample_efficiency.json")
    ap.add_argument("--work", default="runs/bench_sample_efficiency")
    ap.add_argument("--table", help="only print the table of these result JSONs (comma-separated)")
    ap.add_argument("--retarget", type=float, help="with --table: rollouts to this target, from the saved curves")
    ap.add_argument("overrides", nargs="*", help="config overrides applied to every run (key=value)")
    args = ap.parse_args()
    if args.table:
        # a (setting, method, seed) given again in a later file (a rerun) replaces the earlier row
        runs = list({(r["config"], r["method"], r["seed"]): r for f in args.table.split(",")
                     for r in json.loads(Path(f).read_text())["runs"]}.values())
        if args.retarget is not None:  # read the saved curves again at another target
            runs = [{**r, "rollouts_to_target": rollouts_to_target(
                r["curve"], args.retarget, r["rollouts"] // int(r["curve"][-1][0]))} if r.get("curve") else r
                for r in runs]
        print(table(_mean_rows(runs), COLUMNS))
        print(markdown(runs))
        return 0
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"--methods: unknown {', '.join(unknown)}; known: {', '.join(METHODS)}")
    configs = args.configs.split(",")
    if args.label and len(configs) > 1:
        ap.error("--label names one setting: give one config with it")
    if args.warm and not Path(args.warm, "config.json").exists():
        ap.error(f"--warm {args.warm}: no saved model there (config.json missing)")
    work, out = Path(args.work), Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {"configs": args.configs, "label": args.label, "warm": args.warm, "seeds": args.seeds,
                "steps": args.steps, "eval_every": args.eval_every, "target": args.target, "methods": methods,
                "overrides": args.overrides}
    runs = []
    for config in configs:
        label = args.label or Path(config).stem
        for seed in (int(s) for s in args.seeds.split(",")):
            warm_run = work / f"{label}_warm_s{seed}"
            cfg = load_config(config, [f"seed={seed}", "train.resume=false", *args.overrides,
                                       f"output_dir={warm_run}", "train.steps=1", "train.save_every=0"])
            per_step = cfg.rollout.prompts_per_step * cfg.rollout.group_size
            warm = Path(args.warm) if args.warm else warm_run / "warm_start"
            if not args.warm and not (warm / "warm_start.json").exists():
                train(cfg)  # one RL step only to get the warm start (warm_start/) every method starts from
            for method in methods:
                runs.append(_one(config, label, method, seed, warm, work, args, per_step))
                out.write_text(json.dumps({"settings": settings, "runs": runs}, indent=1))  # kept if cut short
    print(table(_mean_rows(runs), [(k, f"rollouts to {args.target}" if k == "rollouts_to_target" else h, f)
                                   for k, h, f in COLUMNS]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
