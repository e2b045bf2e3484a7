"""What reading the sampler's log-probs saves and what rollout correction costs (HF engine, CPU).

For the multi-update presets (dapo, gspo) pi_old used to come from one extra no-grad forward of
the learner over the whole batch; with the HF engine (sampler == learner) it now comes from the
log-probs `generate` drew the tokens with. This runs the same short training on this checkout and
on an older commit (`--before`, checked out into a temporary git worktree), alternating the two
run by run so that a shared machine's load hits both alike, and reports the median s/step and
s/update; `--corrections` also times `algo.rollout_correction` modes on this checkout (a few
elementwise ops on (N, T): expected ~0).

    OMP_NUM_THREADS=1 python benchmarks/correctness/sampler_logprobs.py --before e7be82c --corrections none token_tis

On a shared, loaded machine whole-run times are noisy; `--parts` times the pieces themselves in
one process, interleaved: the no-grad learner forward that pi_old from the sampler saves, the
rollout-correction weights and statistics of the whole batch, and the whole `Learner.update`.

    OMP_NUM_THREADS=1 python benchmarks/correctness/sampler_logprobs.py --parts --repeats 15
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

ROOT = Path(__file__).resolve().parents[2]
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
    from mmrlvr.recipe.loop import train

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


def parts(presets: list[str], repeats: int) -> list[dict]:
    """Median seconds of the saved forward, the correction and one update, per preset."""
    import copy
    import time

    import torch
    from accelerate import Accelerator

    from mmrlvr.algos.losses import rollout_correction_stats, rollout_correction_weights
    from mmrlvr.checks.resolve import resolve_config
    from mmrlvr.config import load_config
    from mmrlvr.models.load import load_policy
    from mmrlvr.models.tiny import build_tiny
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.tasks import load_task
    from mmrlvr.train.learner import Learner, loss_mask
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import advantages_for, collect
    from mmrlvr.verifiers.score import InProcessScorer

    torch.set_num_threads(1)
    model, processor = load_policy(str(build_tiny(Path(tempfile.mkdtemp()) / "tiny", seed=0)))
    out = []
    for preset in presets:
        over = [a for a in ARGS if a.startswith(("rollout.", "rewards="))] + [f"algo.algorithm={preset}"]
        cfg = resolve_config(load_config(ROOT / "configs/quickstart.yaml", over))
        engine = HFRolloutEngine(model, processor)
        batch = collect(engine, SeededStream(load_task("counting", "train", 64, 0), 0), InProcessScorer(), cfg, seed=1)
        adv, mask = advantages_for(batch, cfg), loss_mask(batch, cfg.algo)
        times: dict = {"forward": [], "correction": [], "update": []}
        for _ in range(repeats):
            policy = copy.deepcopy(model).train()
            opt = torch.optim.AdamW(policy.parameters(), lr=1e-4)
            learner = Learner(cfg, policy, opt, Accelerator(cpu=True), engine.suppress_ids)
            torch.set_num_threads(1)
            t0 = time.perf_counter()
            old = learner.logprobs(batch, learner.micro(adv.shape[0]))  # what the sampler's log-probs replace
            t1 = time.perf_counter()
            w = rollout_correction_weights(old, batch.sampler_logprobs, mask, "token_tis", 2.0)
            rollout_correction_stats(old, batch.sampler_logprobs, mask, w, "token_tis", 2.0)
            t2 = time.perf_counter()
            learner.update(batch, adv, seed=0)
            t3 = time.perf_counter()
            for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                times[k].append(v)
        row = {"preset": preset, "rows": int(adv.shape[0]), **{f"{k}_s": statistics.median(v) for k, v in times.items()}}
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


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
    p.add_argument("--parts", action="store_true", help="time the saved forward, the correction and the update")
    p.add_argument("--one", nargs=3, metavar=("PRESET", "CORRECTION", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one[0], int(args.one[2]), args.one[1])))
        return
    if args.parts:
        rows = parts(args.presets, args.repeats)
        (ROOT / "benchmarks/results/sampler_logprobs_parts.json").write_text(json.dumps(rows, indent=1) + "\n")
        print("| preset | rows | saved no-grad forward (s) | token_tis weights + stats (s) | Learner.update (s) |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['preset']} | {r['rows']} | {r['forward_s']:.4f} | {r['correction_s']:.5f} | {r['update_s']:.3f} |")
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
