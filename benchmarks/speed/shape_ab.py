"""On/off A/B measurements over vs_trl.py's shapes: the command line, the per-shape loop, the
rollout arms. Kept apart from common.py because they read vs_trl.py's SHAPES, and vs_trl.py reads
common.py: with them in common.py the two scripts imported each other."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import median_after_warmup


def shape_ab_args(default_shapes: str, out: str, extra: tuple = ()):
    """The command line of an on/off A/B over vs_trl.py's shapes: (args, shape names), the names
    checked against vs_trl.SHAPES before anything heavy runs; one torch thread. `extra`: more
    (flag, default, help) string options."""
    import argparse

    import torch

    from benchmarks.speed.vs_trl import SHAPES

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--shapes", default=default_shapes)
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default=out)
    for flag, default, text in extra:
        ap.add_argument(flag, default=default, help=text)
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.shapes.split(",") if args.shapes else []
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"--shapes: unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    return args, names


def run_shapes(args, names: list[str], header: str, measure, row) -> dict:
    """An A/B over vs_trl.py's shapes: `measure(name, warm start, repeats) -> dict` per shape, each
    printed as one markdown row (`row(name, result) -> str`) under `header` as soon as it is done.
    Returns name -> result."""
    from benchmarks.speed.vs_trl import SHAPES, warm_for

    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    results = {}
    for name in names:
        results[name] = measure(name, warm_for(Path(args.work), SHAPES[name]["warm"]), args.repeats)
        print(row(name, results[name]), flush=True)
    return results


def shape_ab_main(default_shapes: str, out: str, header: str, measure, row, key: str = "results") -> int:
    """The whole `main` of a per-shape A/B: parse the command line (`shape_ab_args`), measure and
    print each shape (`run_shapes`), write {"settings", key: results} to --out."""
    import json

    args, names = shape_ab_args(default_shapes, out)
    results = run_shapes(args, names, header, measure, row)
    Path(args.out).write_text(json.dumps({"settings": vars(args), key: results}, indent=1))
    print(f"wrote {args.out}")
    return 0


def rollout_ab(name: str, warm: Path, repeats: int, field: str, values: tuple, work: str) -> dict:
    """`HFRolloutEngine.rollout` of one batch of vs_trl.py's shape `name` with `rollout.<field>` set
    to each of `values`, same prompts and seeds, alternating; medians after one warm-up repeat of
    the rollout seconds and of the seconds per decoding step (rollout / the longest completion:
    fair where the arms sample other tokens). Returns both, per value, the rows, and whether every
    arm sampled the same ids in every repeat."""
    import dataclasses
    import time

    import torch

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from benchmarks.speed.vs_trl import SHAPES
    from benchmarks.speed.vs_trl_arms import _samples, load_bench_config, prompts

    shape = {**SHAPES[name], "name": name}
    cfg = load_bench_config(shape, warm, repeats, Path(work) / name)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    torch.set_num_threads(1)
    b, g = prompts(shape), shape["group"]
    samples = _samples(cfg, b * repeats)
    engine = HFRolloutEngine(model, processor)
    secs: dict = {v: [] for v in values}
    per_step: dict = {v: [] for v in values}
    same = True
    for i in range(repeats):
        ids = []
        for v in values:
            t0 = time.perf_counter()
            out = engine.rollout(samples[i * b:(i + 1) * b], g, dataclasses.replace(cfg.rollout, **{field: v}), seed=i)
            dt = time.perf_counter() - t0
            secs[v].append(dt)
            per_step[v].append(dt / max(int(out.completion_mask.sum(1).max()), 1) * 1e3)
            ids.append(out.completion_ids)
        same = same and all(x.shape == ids[0].shape and torch.equal(x, ids[0]) for x in ids)
    return {"rollout_s": {v: median_after_warmup(secs[v]) for v in values},
            "ms_per_decode_step": {v: median_after_warmup(per_step[v]) for v in values}, "rows": b * g,
            "same_ids": same}
