"""PRCO (Observer then Solver, `rollout.episode: prco`) against GRPO at equal completions generated.

    python benchmarks/learning/prco.py [--seeds 0,1,2] [--steps 20] [--out benchmarks/results/prco.json]
    python benchmarks/learning/prco.py --table benchmarks/results/prco.json   # reprint a saved run

Per seed, one warm start (`configs/prco_tiny.yaml`'s: 150 supervised steps on the counting task's
flawed teacher) is shared by both arms. GRPO: `rollout.episode=single`, 8 prompts x 4 answers = 32
completions per step. PRCO: the config's 4 prompts x 2 captions x (1 + 3 Solver answers) = 32
completions per step. Same steps, same lr. Held-out accuracy (64 boards, greedy) is measured each
arm's own way (GRPO: one answer; PRCO: a caption, then the Solver's answer) before and after RL,
and crosswise after RL: PRCO's policy answering alone (no caption), GRPO's through the
Observer/Solver pipeline. `prco_nogate` (`--arms grpo,prco,prco_nogate`) is PRCO without the leak
gate. The JSON keeps every run; the table prints each seed and the mean.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import table, warm_start_dir  # noqa: E402

from mmrlvr.config import load_config  # noqa: E402
from mmrlvr.recipe.eval_cli import run_eval  # noqa: E402
from mmrlvr.recipe.loop import train  # noqa: E402

CONFIG = "configs/prco_tiny.yaml"
GRPO = ["rollout.episode=single", "rollout.episode_args={}", "rollout.prompts_per_step=8", "rollout.group_size=4"]
ARMS = {"grpo": GRPO, "prco": [], "prco_nogate": ["rollout.episode_args.leak_gate=none"]}  # the last: no leak gate


def completions(cfg) -> int:
    """Completions generated over the run: prompts x rows per prompt (PRCO: captions x (1 + K)) x steps."""
    r = cfg.rollout
    per = r.group_size * (1 + int(r.episode_args.get("solver_answers", 2))) if r.episode == "prco" else r.group_size
    return cfg.train.steps * r.prompts_per_step * per


def run_arm(name: str, seed: int, steps: int, warm: Path, work: Path, extra: list[str]) -> dict:
    over = [f"seed={seed}", f"train.steps={steps}", f"output_dir={work / f'{name}_s{seed}'}", f"warm_start.checkpoint={warm}",
            "train.eval_every=0", "verifier_workers=0", *extra]
    cfg = load_config(CONFIG, over)
    t0 = time.perf_counter()
    summary = train(cfg)
    wall = time.perf_counter() - t0
    other = GRPO[:2] if name.startswith("prco") else []  # the other arm's way of answering (prco: the config's own)
    cross = run_eval(load_config(CONFIG, [*over[:3], "verifier_workers=0", *other]), str(work / f"{name}_s{seed}" / "model"))
    return {"arm": name, "seed": seed, "steps": steps, "completions": completions(cfg),
            "before": summary["eval_before"]["accuracy"], "after": summary["eval_after"]["accuracy"],
            "after_other_way": cross["accuracy"], "other_way_mean_length": cross["mean_length"], "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--work", default="/tmp/bench_prco")
    ap.add_argument("--out", default="benchmarks/results/prco.json")
    ap.add_argument("--arms", default="grpo,prco", help=f"some of {', '.join(ARMS)}")
    ap.add_argument("--table", default=None)
    a = ap.parse_args()
    if a.table:
        print(render(json.loads(Path(a.table).read_text())["runs"]))
        return
    seeds = [int(s) for s in a.seeds.split(",")]
    out = Path(a.out)
    arms = a.arms.split(",")
    old = json.loads(out.read_text())["runs"] if out.exists() else []
    runs = [r for r in old if r["seed"] not in seeds or r["arm"] not in arms]  # other runs in --out are kept
    for seed in seeds:
        work = Path(a.work) / f"s{seed}"
        warm = warm_start_dir(work, seed, CONFIG)
        for arm in arms:
            runs.append(run_arm(arm, seed, a.steps, warm, work, ARMS[arm]))
            out.write_text(json.dumps({"config": CONFIG, "arms": ARMS, "runs": runs}, indent=1))
    print(render(runs))


def render(runs: list[dict]) -> str:
    rows = list(runs)
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        if mine:
            rows.append({"arm": arm, "seed": "mean", **{k: statistics.mean(r[k] for r in mine) for k in
                                                        ("completions", "before", "after", "after_other_way", "wall_s")}})
    return table(rows, [("arm", "arm", ""), ("seed", "seed", ""), ("completions", "completions", ".0f"),
                        ("before", "acc before", ".3f"), ("after", "acc after", ".3f"),
                        ("after_other_way", "after, other way", ".3f"), ("wall_s", "wall s", ".0f")])


if __name__ == "__main__":
    main()
