"""Faults a real run meets, each tried once: counts of what went wrong (all should be 0).

    python benchmarks/faults/faults.py [--timeout 60] [--json benchmarks/results/faults.json]

Each case feeds one hostile or broken input to the part of mmrlvr that meets it in a run (a planted
checkpoint object, a processor-refused image, ten broken verifier plug-ins, a changed config on
resume, a busy run directory, a YAML alias bomb, 16-bit and 100 MP images, a variable-frame-rate
clip, malformed rows and cells, still images named .mp4, unusable references...) and classifies
the outcome:

- traceback: an exception other than the one-line error the fault should give escaped;
- hang: the case ran past `--timeout` seconds (SIGALRM);
- silent wrong result: no error, warning or failure verdict, and a wrong value (code ran, reward
  given, frame misplaced, row accepted);
- data lost: good rows dropped with the bad, the first run's files changed, an empty output.

Prints one line per case and the totals; exits 1 unless every count is 0. No model is loaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
os.chdir(ROOT)
sys.path.append(str(ROOT))  # the repository root, for `benchmarks.` imports when run as a script
from benchmarks.faults.fault_cases import CASES, Lost, Silent  # noqa: E402 - after the chdir: the cases use repository paths
import benchmarks.faults.fault_cases_data  # noqa: E402,F401 - registers the data, CLI and verifier cases after those


# ---------------------------------------------------------------- runner

def _run_case(fn, conn) -> None:
    """In a forked child: run one case, send (outcome, why). A crash of the process (a decoder's
    abort) sends nothing and is counted as a traceback by the parent."""
    try:
        with tempfile.TemporaryDirectory() as d:
            fn(Path(d))
        conn.send(("ok", ""))
    except Silent as exc:
        conn.send(("silent wrong results", str(exc)[:200]))
    except Lost as exc:
        conn.send(("data lost", str(exc)[:200]))
    except BaseException as exc:  # noqa: BLE001 - counting is the point
        conn.send(("tracebacks", f"{type(exc).__name__}: {str(exc)[:160]}"))
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import multiprocessing as mp
    import warnings

    import datasets
    import torch

    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning is what the 100 MP case provokes
    logging.getLogger("mmrlvr").setLevel(logging.ERROR)  # the cases' own warnings are expected
    counts = {"inputs tried": 0, "tracebacks": 0, "hangs": 0, "silent wrong results": 0, "data lost": 0}
    rows = []
    ctx = mp.get_context("fork")  # each case in its own process: an abort or a hang is counted, not fatal
    for name, fn in CASES:
        counts["inputs tried"] += 1
        t0 = time.perf_counter()
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_run_case, args=(fn, child))
        proc.start()
        child.close()
        outcome, why = "tracebacks", "the process died"
        if parent.poll(args.timeout):
            try:
                outcome, why = parent.recv()
            except EOFError:
                outcome, why = "tracebacks", "the process died"
        elif proc.is_alive():
            outcome, why = "hangs", f"still running after {args.timeout:g} s"
        proc.kill()
        proc.join()
        if outcome == "tracebacks" and why == "the process died":
            why = f"the process died (exit code {proc.exitcode})"
        if outcome != "ok":
            counts[outcome] += 1
        rows.append({"case": name, "outcome": outcome, "seconds": round(time.perf_counter() - t0, 2), "why": why})
        print(f"{name:55s} {outcome:22s} {rows[-1]['seconds']:6.2f} s" + ("" if outcome == "ok" else f"  {why}"),
              flush=True)
    print("; ".join(f"{k}: {v}" for k, v in counts.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "cases": rows}, indent=1))
    return 0 if all(v == 0 for k, v in counts.items() if k != "inputs tried") else 1


if __name__ == "__main__":
    sys.exit(main())
