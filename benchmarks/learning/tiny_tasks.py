"""Each synthetic `configs/<task>_tiny.yaml` trained end to end for several seeds: held-out accuracy
before and after RL (mean IoU for grounding) and wall time, as the table in docs/results/tiny-tasks.md.

    python benchmarks/learning/tiny_tasks.py [--tasks geometry,chart,grounding] [--seeds 0,1,2] [--parallel 2]
    python benchmarks/learning/tiny_tasks.py --collect runs/bench_tiny_tasks     # only re-read finished runs

Each run is `mmrlvr train configs/<task>_tiny.yaml seed=S output_dir=WORK/<task>_sS` in its own
process (one torch thread, as the configs say); `--parallel` runs that many side by side, so on
the 2-core machine two runs share the machine as they would in CI. The table reads each run's
`summary.json`; wall time is the process's, from start to exit (model build, warm start, both
evaluations and RL).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import table  # noqa: E402


def _run(task: str, seed: int, work: Path) -> float:
    out = work / f"{task}_s{seed}"
    t0 = time.perf_counter()
    with open(work / f"{task}_s{seed}.log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", f"configs/{task}_tiny.yaml",
                               f"seed={seed}", f"output_dir={out}", "train.resume=false"],
                              stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"{task} seed {seed} failed (exit {proc.returncode}); see {work / f'{task}_s{seed}.log'}")
    wall = time.perf_counter() - t0
    (out / "bench_wall.json").write_text(json.dumps({"wall_s": wall}))
    return wall


def _row(task: str, seed: int, work: Path) -> dict:
    run = work / f"{task}_s{seed}"
    summary = json.loads((run / "summary.json").read_text())
    wall = run / "bench_wall.json"
    return {
        "task": task, "seed": seed, "n": summary["eval_after"]["n"],
        "before": summary["eval_before"]["accuracy"], "after": summary["eval_after"]["accuracy"],
        "gain": summary["eval_after"]["accuracy"] - summary["eval_before"]["accuracy"],
        "wall_s": json.loads(wall.read_text())["wall_s"] if wall.exists() else summary["wall_time_s"],
        "parts_before": summary["eval_before"]["metrics"], "parts_after": summary["eval_after"]["metrics"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="geometry,chart,grounding")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--work", default="runs/bench_tiny_tasks")
    ap.add_argument("--collect", metavar="DIR", help="no training: read the finished runs in DIR")
    ap.add_argument("--out", default="benchmarks/results/tiny_tasks.json")
    args = ap.parse_args()
    tasks, seeds = args.tasks.split(","), [int(s) for s in args.seeds.split(",")]
    for task in tasks:
        if not Path(f"configs/{task}_tiny.yaml").exists():
            raise SystemExit(f"configs/{task}_tiny.yaml does not exist")
    work = Path(args.collect or args.work)
    if not args.collect:
        work.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda ts: _run(*ts, work), [(t, s) for t in tasks for s in seeds]))
    rows = [_row(t, s, work) for t in tasks for s in seeds]
    summary = []
    for task in tasks:
        rs = [r for r in rows if r["task"] == task]
        gains = [r["gain"] for r in rs]
        summary.append({
            "task": task, "seeds": len(rs), "before": statistics.mean(r["before"] for r in rs),
            "after": statistics.mean(r["after"] for r in rs), "gain": statistics.mean(gains),
            "gain_sd": statistics.stdev(gains) if len(gains) > 1 else 0.0,
            "wall_s": statistics.mean(r["wall_s"] for r in rs), "wall_max_s": max(r["wall_s"] for r in rs),
        })
    print(table(rows, [("task", "task", ""), ("seed", "seed", "d"), ("n", "n", "d"), ("before", "before RL", ".3f"),
                       ("after", "after RL", ".3f"), ("gain", "gain", "+.3f"), ("wall_s", "wall s", ".0f")]))
    print()
    print(table(summary, [("task", "task", ""), ("seeds", "seeds", "d"), ("before", "before", ".3f"),
                          ("after", "after", ".3f"), ("gain", "gain", "+.3f"), ("gain_sd", "sd", ".3f"),
                          ("wall_s", "mean wall s", ".0f"), ("wall_max_s", "max wall s", ".0f")]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"tasks": tasks, "seeds": seeds, "parallel": args.parallel, "summary": summary,
                               "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
