"""What reading the sampler's log-probs saves and what rollout correction costs (HF engine, CPU).

For the multi-update presets (dapo, gspo) pi_old used to come from one extra no-grad forward of
the learner over the whole batch; with the HF engine (sampler == learner) it now comes from the
log-probs `generate` drew the tokens with. This runs the same short training per preset and
reports s/step and the update's share; `--corrections` also times `algo.rollout_correction`
modes (a few elementwise ops on (N, T): expected ~0).

Run it on two commits (before/after) with the same arguments and compare the JSON files:
    OMP_NUM_THREADS=1 python benchmarks/sampler_logprobs.py --label after --corrections none token_tis
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "task.train_size=256", "task.eval_size=8", "warm_start.steps=20", "warm_start.batch_size=16",
    "rollout.prompts_per_step=8", "rollout.group_size=8", "rollout.max_new_tokens=12",
    "train.save_every=0", "train.log_every=1", "eval.batch_size=8", "verifier_workers=0",
    f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:even_length}}]",
]


def run(preset: str, steps: int, correction: str | None) -> dict:
    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"algo.algorithm={preset}", f"train.steps={steps}", f"output_dir={tmp}"]
        if correction is not None:  # None: the key as the commit knows it (absent before)
            extra.append(f"algo.rollout_correction={correction}")
        train(load_config(ROOT / "configs/quickstart.yaml", ARGS + extra))
        rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/step" in r][1:]  # step 1 warms up
    return {
        "s_per_step": statistics.median(r["time/step"] for r in rows),
        "s_update": statistics.median(r["time/update"] for r in rows),
        "steps_timed": len(rows),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True, help="before / after: names the results file")
    p.add_argument("--presets", nargs="+", default=["dapo", "gspo"])
    p.add_argument("--corrections", nargs="*", default=[], help="rollout_correction modes to time")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    results = []
    for preset in args.presets:
        for corr in args.corrections or [None]:
            runs = [run(preset, args.steps, corr) for _ in range(args.repeats)]
            row = {"preset": preset, "correction": corr or "(default)", "commit": commit,
                   **{k: statistics.median(r[k] for r in runs) for k in ("s_per_step", "s_update")}}
            results.append(row)
            print(json.dumps(row), flush=True)
    out = ROOT / "benchmarks/results" / f"sampler_logprobs_{args.label}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print("| preset | correction | commit | s/step | s/update |\n|---|---|---|---|---|")
    for r in results:
        print(f"| {r['preset']} | {r['correction']} | {r['commit']} | {r['s_per_step']:.3f} | {r['s_update']:.3f} |")


if __name__ == "__main__":
    main()
