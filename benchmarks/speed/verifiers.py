"""Rows per second of every built-in verifier through `mmrlvr score`'s code path.

    python benchmarks/speed/verifiers.py [--rows 2000] [--workers 2]

Writes a JSONL of realistic completions per verifier (right and wrong answers, some garbage),
scores it with the same `score_file` + `VerifierPool` that `mmrlvr score` uses, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

CASES = {
    "count": [("<answer>3</answer>", 3), ("<answer>4</answer>", 3), ("<think>one two three</think><answer>3</answer>", 3)],
    "math": [("<answer>\\frac{1}{2}</answer>", "0.5"), ("so the answer is 2\\sqrt{3}", "\\sqrt{12}"), ("\\boxed{x = 7}", "8")],
    "choice": [("The answer is (B).", "B"), ("<answer>C</answer>", "B"), ("<answer>A or B</answer>", "B")],
    "number": [("<answer>1,250</answer>", 1200), ("<answer>12.5%</answer>", 12.5), ("<answer>7 kg</answer>", 9)],
    "iou": [("[10, 10, 50, 50]", [10, 10, 50, 50]), ('{"bbox_2d": [12, 8, 40, 60]}', [10, 10, 50, 50]),
            ("<|box_start|>(100,100),(500,500)<|box_end|>", [10, 10, 50, 50])],
    "boxes": [("[[10,10,50,50],[60,60,90,90]]", [[10, 10, 50, 50], [60, 60, 90, 90]]),
              ("[[10,10,50,50]]", [[10, 10, 50, 50], [60, 60, 90, 90]])],
    "order": [("C, A, B", ["C", "A", "B"]), ("B -> A -> C", ["C", "A", "B"]), ("[A, B, C, D, E]", ["E", "D", "C", "B", "A"])],
    "tiou": [("[2.5, 7.0]", [2.5, 7.0]), ("from 3 to 9 seconds", [2.5, 7.0])],
    "format": [("<think>a</think><answer>3</answer>", None), ("<answer>3</answer>", None)],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/verifiers.json")
    args = ap.parse_args()
    from benchmarks.common import table

    from mmrlvr.verifiers.pool import VerifierPool
    from mmrlvr.verifiers.rescore import score_file

    rng = random.Random(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, VerifierPool(timeout=5.0, workers=args.workers) as pool:
        for name, cases in CASES.items():
            src, dst = Path(tmp) / f"{name}.jsonl", Path(tmp) / f"{name}.out.jsonl"
            with open(src, "w") as f:
                for i in range(args.rows):
                    completion, ref = rng.choice(cases)
                    if i % 50 == 0:
                        completion = completion + " " + "".join(rng.choice("{}[]()<>\\,.0123456789ab") for _ in range(200))
                    meta = {"image_size": [100, 100], "box_format": "norm1000"} if "box_start" in completion else {"image_size": [100, 100]}
                    f.write(json.dumps({"id": i, "verifier": name, "completion": completion, "reference": ref, "meta": meta}) + "\n")
            pool(name, [cases[0][0]], [None] if name == "format" else [_warm(name, cases[0][1])])  # spawn + imports
            t0 = time.perf_counter()
            counts = score_file(src, dst, pool, progress=False)
            done, bad = counts.scored, counts.bad_lines
            dt = time.perf_counter() - t0
            scores = [json.loads(x)["score"] for x in dst.read_text().splitlines()]
            rows.append({"verifier": name, "rows": done, "rows_per_s": done / dt, "mean_score": sum(scores) / len(scores), "bad": bad})
    print(table(rows, [("verifier", "verifier", ""), ("rows", "rows", "d"), ("rows_per_s", "rows/s", ".0f"),
                       ("mean_score", "mean score", ".3f")]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "results": rows}, indent=1))
    print(f"wrote {out}")
    return 0


def _warm(name, ref):
    from mmrlvr.types import Sample

    return Sample("w", (), ref, name, meta={"image_size": [100, 100]})


if __name__ == "__main__":
    sys.exit(main())
