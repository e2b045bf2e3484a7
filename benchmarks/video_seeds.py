"""Seed table of the tiny video runs: GRPO with and without temporal contrast (T-GRPO).

For each seed, `configs/video_motion_tiny.yaml` runs first (warm start + GRPO); the contrast run
(`configs/video_motion_contrast_tiny.yaml`) starts from the same warm-started model, so the two
differ only in the temporal bonus. Prints a table and writes benchmarks/results/video_seeds.json.

    flock /work/heavy.lock python benchmarks/video_seeds.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(config: str, out: Path, seed: int, extra: list[str]) -> dict:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "mmrlvr.cli", "train", config, f"seed={seed}", f"output_dir={out}",
           "train.resume=false", *extra]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    temporal = [m for m in metrics if "temporal/ordered_acc" in m]
    return {
        "before": summary["eval_before"]["accuracy"], "after": summary["eval_after"]["accuracy"],
        "gain": summary["accuracy_gain"], "wall_s": time.perf_counter() - t0,
        "ordered_acc_last": temporal[-1]["temporal/ordered_acc"] if temporal else None,
        "shuffled_acc_last": temporal[-1]["temporal/shuffled_acc"] if temporal else None,
        "bonus_frac_mean": sum(m["temporal/bonus_frac"] for m in temporal) / len(temporal) if temporal else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--work", default="runs/video_seeds")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "video_seeds.json"))
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        base = Path(args.work) / f"grpo_s{seed}"
        rows.append({"seed": seed, "run": "grpo", **_run("configs/video_motion_tiny.yaml", base, seed, [])})
        warm = ["warm_start.steps=0", f"warm_start.checkpoint={base / 'warm_start'}"]
        row = _run("configs/video_motion_contrast_tiny.yaml", Path(args.work) / f"tgrpo_s{seed}", seed, warm)
        rows.append({"seed": seed, "run": "grpo + T-GRPO", **row})
        Path(args.out).write_text(json.dumps(rows, indent=1))
        for r in rows[-2:]:
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
