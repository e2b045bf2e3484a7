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
