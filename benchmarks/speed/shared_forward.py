"""The step time of vppo and tor against `none`, with and without sharing the update's forward.

    python benchmarks/speed/shared_forward.py [--config configs/grounding_tiny.yaml] [--repeats 6]

One process, one model, one optimizer. Each repeat samples one real batch (the config's prompts
x group size, up to its max_new_tokens) and then runs every arm on that same batch, in a rotated
order so that load drifts fall on all arms alike: advantages, token weights (`weigh_tokens`,
`token_weighting.share_forward` off or on) and the `Learner.update`. An arm's step time is the
repeat's rollout time (sampling + scoring, the same work for every method) plus its own
weighting + update time; the table gives each arm's median over the repeats and its ratio to
`none` within this run, in wall time and in this process's CPU time (one torch thread: on a
machine shared with other jobs the CPU time is what the work costs, the wall time what the load
made of it).

The model is the untrained tiny policy (no warm start: the cost depends on shapes, not on what
the model knows) at lr 0 (the work of every update is identical and the policy does not drift
between arms); its completions run to max_new_tokens, as the grounding warm start's 24 tokens
do. Its rewards are all 0, so they are replaced by a fixed seeded 0/1 pattern (half correct, every
group mixed): every row carries an advantage and is weighed, the most expensive case.
Diagnostics are off, as in `benchmarks/learning/token_weighting.py`: each method computes only its signals.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

ARMS = (("none", False), ("vppo", False), ("vppo", True), ("tor", False), ("tor", True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/grounding_tiny.yaml")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--out", default="benchmarks/results/shared_forward.json")
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = ap.parse_args()
    from accelerate import Accelerator
    from benchmarks.common import table

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.tasks import load_task
    from mmrlvr.train.learner import Learner
    from mmrlvr.train.setup import set_threads_and_seed, task_args
    from mmrlvr.methods.token_weighting.signals import black_fill
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import advantages_for, collect
    from mmrlvr.methods.token_weighting.weigher import weigh_tokens
    from mmrlvr.verifiers.score import make_scorer

    cfg = load_config(args.config, ["token_weighting.diagnostics=false", "train.lr=0", "verifier_workers=0",
                                    *args.overrides])
    set_threads_and_seed(cfg)
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens, cfg.rollout.engine))
    model, processor = load_policy(cfg.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    engine = HFRolloutEngine(model, processor)
    learner = Learner(cfg, model, optimizer, Accelerator(cpu=True), engine.suppress_ids)
    scorer = make_scorer(cfg.verifier_timeout, cfg.verifier_workers)
    stream = SeededStream(load_task(cfg.task.name, "train", cfg.task.train_size, cfg.seed, **task_args(cfg)), cfg.seed)
    fill = black_fill(processor)
    runs: list[dict] = []
    for rep in range(args.repeats + 1):  # repeat 0 warms up (allocator, first-call costs), not counted
        t0, c0 = time.perf_counter(), time.process_time()
        model.eval()
        batch = collect(engine, stream, scorer, cfg, seed=rep, step=rep)
        roll, roll_cpu = time.perf_counter() - t0, time.process_time() - c0
        gen = torch.Generator().manual_seed(rep)
        batch.rewards = (torch.rand(batch.rewards.shape, generator=gen) < 0.5).float()
        batch.rewards[:, 0], batch.rewards[:, 1] = 1.0, 0.0  # every group mixed
        order = ARMS[rep % len(ARMS):] + ARMS[: rep % len(ARMS)]
        for method, share in order:
            c = dataclasses.replace(cfg, token_weighting=dataclasses.replace(cfg.token_weighting, method=method,
                                                                             share_forward=share))
            model.train()
            t1, c1 = time.perf_counter(), time.process_time()
            adv = advantages_for(batch, c)
            tw = weigh_tokens(model, batch, adv, c, c.algo, engine.suppress_ids, step=rep + 1, fill=fill, share=share)
            learner.cfg = c
            learner.update(batch, adv, tw.weights, pending=tw.pending, seed=rep)
            own, own_cpu = time.perf_counter() - t1, time.process_time() - c1
            done = tw.result
            if rep:
                runs.append({"repeat": rep, "method": method, "share_forward": share, "rollout_s": roll,
                             "weigh_update_s": own, "rollout_cpu_s": roll_cpu, "weigh_update_cpu_s": own_cpu,
                             "signals_s": done.metrics.get("time/token_signals", 0.0),
                             "mean_length": float(batch.completion_mask.sum(1).float().mean())})
    scorer.close()
    rows = []
    med = statistics.median
    for method, share in ARMS:
        rs = [r for r in runs if r["method"] == method and r["share_forward"] == share]
        step = med(r["rollout_s"] + r["weigh_update_s"] for r in rs)
        signals = med(r["signals_s"] for r in rs)
        rows.append({"arm": f"{method}{' (shared)' if share else ''}", "method": method, "share_forward": share,
                     "step_s": step, "weigh_update_s": med(r["weigh_update_s"] for r in rs), "signals_s": signals,
                     "step_over_step_minus_signals": step / (step - signals),
                     "step_cpu_s": med(r["rollout_cpu_s"] + r["weigh_update_cpu_s"] for r in rs),
                     "weigh_update_cpu_s": med(r["weigh_update_cpu_s"] for r in rs)})
    for r in rows:
        r["vs_none"] = r["step_s"] / rows[0]["step_s"]
        r["vs_none_cpu"] = r["step_cpu_s"] / rows[0]["step_cpu_s"]
    print(table(rows, [("arm", "arm", ""), ("step_s", "step s", ".3f"), ("weigh_update_s", "weigh+update s", ".3f"),
                       ("signals_s", "signals s", ".3f"), ("vs_none", "vs none", ".3f"),
                       ("step_over_step_minus_signals", "step/(step-signals)", ".3f"),
                       ("step_cpu_s", "step CPU s", ".3f"), ("vs_none_cpu", "vs none (CPU)", ".3f")]))
    meta = {"config": args.config, "overrides": args.overrides, "repeats": args.repeats, "prompts": cfg.rollout.prompts_per_step,
            "group": cfg.rollout.group_size, "max_new_tokens": cfg.rollout.max_new_tokens,
            "mean_length": statistics.mean(r["mean_length"] for r in runs), "torch_threads": torch.get_num_threads()}
    Path(args.out).write_text(json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1))
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
