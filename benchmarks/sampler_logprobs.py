"""What reading the sampler's log-probs saves and what rollout correction costs (HF engine, CPU).

For the multi-update presets (dapo, gspo) pi_old used to come from one extra no-grad forward of
the learner over the whole batch; with the HF engine (sampler == learner) it now comes from the
log-probs `generate` drew the tokens with. This runs the same short training on this checkout and
on an older commit (`--before`, checked out into a temporary git worktree), alternating the two
run by run so that a shared machine's load hits both alike, and reports the median s/step and
s/update; `--corrections` also times `algo.rollout_correction` modes on this checkout (a few
elementwise ops on (N, T): expected ~0).

    OMP_NUM_THREADS=1 python benchmarks/sampler_logprobs.py --before e7be82c --corrections none token_tis
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "task.train_size=256", "task.eval_size=8", "warm_start.steps=20", "warm_start.batch_size=16",
    "rollout.prompts_per_step=8", "rollout.group_size=8", "rollout.max_new_tokens=12",
    "train.save_every=0", "train.log_every=1", "eval.batch_size=8", "verifier_workers=0",
    f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:even_length}}]",
]


def one_run(preset: str, steps: int, correction: str) -> dict:
    """In this process: train, then the medians of time/step and time/update (step 1 warms up)."""
    import torch

    import mmrlvr
    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"algo.algorithm={preset}", f"train.steps={steps}", f"output_dir={tmp}"]
        if correction != "(default)":  # an older commit has no such key
            extra.append(f"algo.rollout_correction={correction}")
        train(load_config(ROOT / "configs/quickstart.yaml", ARGS + extra))
        rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/step" in r][1:]
    return {"s_per_step": statistics.median(r["time/step"] for r in rows),
            "s_update": statistics.median(r["time/update"] for r in rows), "code": mmrlvr.__file__}


def _spawn(code_dir: Path, preset: str, steps: int, correction: str) -> dict:
    """One run in a fresh process importing mmrlvr from `code_dir`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(code_dir)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", preset, correction, str(steps)]
    out = subprocess.run(cmd, cwd=code_dir, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _commit(ref: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=cwd, capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", help="commit to compare against (run from a temporary worktree)")
    p.add_argument("--presets", nargs="+", default=["dapo", "gspo"])
    p.add_argument("--corrections", nargs="*", default=[], help="rollout_correction modes to time here")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one", nargs=3, metavar=("PRESET", "CORRECTION", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one[0], int(args.one[2]), args.one[1])))
        return
    variants = [("after", ROOT, c) for c in (args.corrections or ["(default)"])]
    tmp = tempfile.mkdtemp()
    if args.before:
        subprocess.run(["git", "worktree", "add", "--detach", f"{tmp}/before", args.before], cwd=ROOT, check=True,
                       capture_output=True)
        variants.insert(0, ("before", Path(tmp) / "before", "(default)"))
    results = []
    try:
        for preset in args.presets:
            runs: dict = {v: [] for v in variants}
            for _ in range(args.repeats):  # alternate: before, after, after+correction, before, ...
                for v in variants:
                    r = _spawn(v[1], preset, args.steps, v[2])
                    assert r["code"].startswith(str(v[1])), (r["code"], v[1])  # ran the code it names
                    runs[v].append(r)
            for (label, where, corr), rs in runs.items():
                row = {"preset": preset, "code": label, "commit": _commit("HEAD", where), "correction": corr,
                       **{k: statistics.median(r[k] for r in rs) for k in ("s_per_step", "s_update")}}
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if args.before:
            subprocess.run(["git", "worktree", "remove", "--force", f"{tmp}/before"], cwd=ROOT, capture_output=True)
    out = ROOT / "benchmarks/results/sampler_logprobs.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print("| preset | code | commit | rollout_correction | s/step | s/update |\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['preset']} | {r['code']} | {r['commit']} | {r['correction']} | {r['s_per_step']:.3f} | "
              f"{r['s_update']:.3f} |")


if __name__ == "__main__":
    main()
