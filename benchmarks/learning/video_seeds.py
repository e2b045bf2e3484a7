"""Seed table of the tiny video runs: GRPO, T-GRPO and TGPO-style temporal contrast.

Three arms per seed, all with the same advantage estimator (`--advantage`, default dr_grpo, the
contrast configs' own: under grpo's std division the bonus on a binary verifier cancels, so a
fair table gives the plain arm the same estimator): `grpo` (`configs/video_motion_tiny.yaml`),
`tgrpo` and `tgpo` (`configs/video_motion_contrast_tiny.yaml` with
`temporal_contrast.method=...`). The first run (grpo, first seed) trains the warm start; every
other run starts RL from that same warm-started model with its own seed (sampling, data order),
so the arms differ only in the bonus. Prints one JSON line per run and writes the results JSON.

    python benchmarks/learning/video_seeds.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARMS = {  # arm -> (config, overrides)
    "grpo": ("configs/video_motion_tiny.yaml", []),
    "tgrpo": ("configs/video_motion_contrast_tiny.yaml", ["temporal_contrast.method=tgrpo"]),
    "tgpo": ("configs/video_motion_contrast_tiny.yaml", ["temporal_contrast.method=tgpo"]),
}


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
        "bonus_mean": sum(m.get("temporal/bonus_mean", 0.0) for m in temporal) / len(temporal) if temporal else None,
        "steps_s": summary.get("wall_time_s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--work", default="runs/video_seeds")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "video_seeds.json"))
    ap.add_argument("--advantage", default="dr_grpo", help="algo.advantage of every arm")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    args = ap.parse_args()
    rows = []
    warm_dir = Path(args.work) / f"{args.arms[0]}_s{args.seeds[0]}" / "warm_start"
    for seed in args.seeds:
        for run in args.arms:
            config, arm_extra = ARMS[run]
            out = Path(args.work) / f"{run}_s{seed}"
            first = not rows
            extra = [] if first else ["warm_start.steps=0", f"warm_start.checkpoint={warm_dir}"]
            extra += [f"algo.advantage={args.advantage}", *arm_extra]
            rows.append({"seed": seed, "run": run, "advantage": args.advantage,
                         "warm_start": "trained here" if first else str(warm_dir),
                         **_run(config, out, seed, extra)})
            Path(args.out).write_text(json.dumps(rows, indent=1))
            print(json.dumps(rows[-1]), flush=True)

if __name__ == "__main__":
    main()
