"""Adversarial completions against every built-in verifier: time per item in-process, time-outs in the pool.

    python benchmarks/correctness/fuzz_verifiers.py [--per-family 40] [--seed 1] [--cap 10] [--pool-timeout 5]

Cases come from `mmrlvr.verifiers.fuzz` (control characters, 1 MB strings, unclosed/nested tags,
digit runs, huge/non-finite numbers, sympy towers, malformed boxes/JSON, bad references, random
mixes). In-process: each item runs in a forked child that reports its time; an item still running
after `--cap` seconds is killed and counted as over the cap (a regex or a big-integer power in C
cannot be interrupted in-process). Pool: the same items through `VerifierPool` (2 workers, the
default 5 s time-out), counting items that hit the time-out. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script


def _child(conn, cases):
    from mmrlvr.verifiers.base import resolve_verifier, safe_verify

    for i, case in enumerate(cases):
        fn = resolve_verifier(case.verifier)
        t0, c0 = time.perf_counter(), time.thread_time()
        v = safe_verify(fn, case.completion, case.sample)
        conn.send((i, time.perf_counter() - t0, time.thread_time() - c0, v.score))
    conn.close()


def in_process(cases, cap: float) -> list[tuple[float, float, float | None]]:
    """(wall s, CPU s, score) per case; (cap, cap, None) when the item was killed at the cap."""
    from mmrlvr.verifiers.base import resolve_verifier

    for name in {c.verifier for c in cases}:  # imports and warm-ups outside the timing
        warm = getattr(resolve_verifier(name), "warmup", None)
        if warm:
            warm()
    ctx = mp.get_context("fork")
    out: list = [None] * len(cases)
    start = 0
    while start < len(cases):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, cases[start:]), daemon=True)
        proc.start()
        child.close()
        nxt = start
        while nxt < len(cases):
            if not parent.poll(cap):
                proc.kill()
                out[nxt] = (cap, cap, None)
                nxt += 1
                break
            try:
                i, dt, cpu, score = parent.recv()
            except EOFError:
                out[nxt] = (cap, cap, None)
                nxt += 1
                break
            out[start + i] = (dt, cpu, score)
            nxt = start + i + 1
        proc.join(timeout=5)
        start = nxt
    return out


def in_pool(cases, timeout: float, workers: int) -> tuple[list, float]:
    from mmrlvr.verifiers.pool import VerifierPool

    by_name = defaultdict(list)
    for k, c in enumerate(cases):
        by_name[c.verifier].append(k)
    verdicts: list = [None] * len(cases)
    t0 = time.perf_counter()
    with VerifierPool(timeout=timeout, workers=workers) as pool:
        for name, idx in by_name.items():
            got = pool(name, [cases[k].completion for k in idx], [cases[k].sample for k in idx])
            for k, v in zip(idx, got):
                verdicts[k] = v
    return verdicts, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-family", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cap", type=float, default=10.0, help="in-process seconds after which an item is killed")
    ap.add_argument("--pool-timeout", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-pool", action="store_true")
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", default="benchmarks/results/fuzz_verifiers.json")
    args = ap.parse_args()
    from benchmarks.common import table

    from mmrlvr.verifiers.fuzz import fuzz_cases, nonfinite_reference

    cases = list(fuzz_cases(args.seed, args.per_family))
    timed = in_process(cases, args.cap)
    verdicts, pool_s = ([None] * len(cases), 0.0) if args.no_pool else in_pool(cases, args.pool_timeout, args.workers)
    rows = []
    for name in dict.fromkeys(c.verifier for c in cases):
        idx = [k for k, c in enumerate(cases) if c.verifier == name]
        secs = [timed[k][1] for k in idx]  # CPU seconds of the scoring thread: robust to a shared machine
        worst = max(idx, key=lambda k: timed[k][1])
        slow_fams = sorted({cases[k].family for k in idx if timed[k][1] > 0.05})
        timeouts = sum(1 for k in idx if verdicts[k] is not None and ("timed out" in verdicts[k].reason or "in time" in verdicts[k].reason))
        rows.append({
            "verifier": name, "items": len(idx), "median_ms": 1000 * statistics.median(secs),
            "slowest_ms": 1000 * timed[worst][1], "slowest_family": cases[worst].family,
            "slowest_wall_ms": 1000 * max(timed[k][0] for k in idx),
            "over_50ms": sum(s > 0.05 for s in secs), "killed_at_cap": sum(timed[k][2] is None for k in idx),
            "pool_timeouts": timeouts, "families_over_50ms": ",".join(slow_fams),
            "max_score_bad_reference": max([(timed[k][2] or 0.0) for k in idx if nonfinite_reference(cases[k])] or [0.0]),
        })
    total = {"verifier": "all", "items": len(cases), "median_ms": 1000 * statistics.median(c for _, c, _ in timed),
             "slowest_ms": max(r["slowest_ms"] for r in rows), "slowest_family": "",
             "slowest_wall_ms": max(r["slowest_wall_ms"] for r in rows),
             "over_50ms": sum(r["over_50ms"] for r in rows), "killed_at_cap": sum(r["killed_at_cap"] for r in rows),
             "pool_timeouts": sum(r["pool_timeouts"] for r in rows), "families_over_50ms": "",
             "max_score_bad_reference": max(r["max_score_bad_reference"] for r in rows)}
    print(table(rows + [total], [
        ("verifier", "verifier", ""), ("items", "items", "d"), ("median_ms", "median CPU ms", ".2f"),
        ("slowest_ms", "slowest CPU ms", ".1f"), ("slowest_family", "slowest family", ""),
        ("slowest_wall_ms", "slowest wall ms", ".1f"), ("over_50ms", "> 50 ms CPU", "d"),
        ("killed_at_cap", f"> {args.cap:g} s", "d"), ("pool_timeouts", "pool time-outs", "d"),
        ("max_score_bad_reference", "max score, NaN/inf ref", ".2f")]))
    print(f"pool: {len(cases)} items in {pool_s:.1f} s ({args.workers} workers, {args.pool_timeout:g} s time-out)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"label": args.label, "settings": vars(args), "pool_seconds": pool_s, "results": rows + [total]}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
