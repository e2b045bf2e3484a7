"""Shared pieces of the benchmarks: a warm-started tiny model and the counting data."""

from __future__ import annotations

import resource
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
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


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


def shape_ab_args(default_shapes: str, out: str):
    """The command line of an on/off A/B over vs_trl.py's shapes: (args, shape names), the names
    checked against vs_trl.SHAPES before anything heavy runs; one torch thread."""
    import argparse

    import torch

    from vs_trl import SHAPES

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--shapes", default=default_shapes)
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default=out)
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.shapes.split(",") if args.shapes else []
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"--shapes: unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    return args, names
