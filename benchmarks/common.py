"""Shared pieces of the benchmarks: a warm-started tiny model and the counting data."""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from pathlib import Path

from mmrlvr.config import load_config


def warm_start_dir(work: Path, seed: int = 0, config: str = "configs/quickstart.yaml",
                   overrides: tuple[str, ...] = ()) -> Path:
    """A warm-started tiny model (built once, then reused): the common start of every contender.

    `overrides` (config `key=value`s, e.g. the pixel bounds) shape the warm start itself, so that a
    benchmark at 448 px starts from a policy trained at 448 px; give each variant its own `work`."""
    from mmrlvr.tasks import load_task
    from mmrlvr.train.progress import Progress
    from mmrlvr.train.setup import prepare_policy, task_args

    done = work / "warm" / "warm_start"
    if not (done / "warm_start.json").exists():  # the supervised warm start alone, no RL step
        cfg = load_config(config, [f"seed={seed}", f"output_dir={work / 'warm'}", "verifier_workers=0",
                                   *overrides])
        train_set = load_task(cfg.task.name, "train", cfg.task.train_size, cfg.seed, **task_args(cfg))
        (work / "warm").mkdir(parents=True, exist_ok=True)
        prepare_policy(cfg, None, train_set, work / "warm", Progress(0, enabled=False))
    return done


def peak_rss_mb() -> float:
    """Peak resident memory of this process itself (VmHWM, Linux).

    Not `ru_maxrss`: Linux carries a parent's peak into a child's `ru_maxrss` across fork and exec,
    so a 13 MB child of a 1.5 GB parent reported 1,513 MB; VmHWM is the calling process's own
    high-water mark. Off Linux (no /proc), `ru_maxrss` is the best there is."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    """This process's resident memory now (VmRSS, Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


@contextlib.contextmanager
def rss_peak(interval: float = 0.002):
    """Within: a thread reads VmRSS every `interval` seconds. Yields a dict; on exit it holds
    `base_mb` (at entry), `above_mb` (the peak above it) and `seconds` (wall time within); while
    within, `samples` counts the sampler's reads (on a loaded machine the thread may wait)."""
    out = {"base_mb": rss_mb(), "samples": 0}
    peak = [out["base_mb"]]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
            out["samples"] += 1
            time.sleep(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - t0
        done.set()
        thread.join()
        out["above_mb"] = max(peak[0], rss_mb()) - out["base_mb"]


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Plain-text table: columns are (key, header, format)."""
    head = [h for _, h, _ in columns]
    body = [[(f"{r[k]:{fmt}}" if isinstance(r.get(k), (int, float)) else str(r.get(k, "-"))) for k, _, fmt in columns] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in body]
    return "\n".join(lines)


def median_after_warmup(xs: list[float]) -> float:
    """The median of repeated timings, the first (warm-up) one dropped."""
    import statistics

    return statistics.median(xs[1:])


def shape_ab_args(default_shapes: str, out: str, extra: tuple = ()):
    """The command line of an on/off A/B over vs_trl.py's shapes: (args, shape names), the names
    checked against vs_trl.SHAPES before anything heavy runs; one torch thread. `extra`: more
    (flag, default, help) string options."""
    import argparse

    import torch

    from vs_trl import SHAPES

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
    from vs_trl import SHAPES, warm_for

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
    from vs_trl import SHAPES
    from vs_trl_arms import _samples, load_bench_config, prompts

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
