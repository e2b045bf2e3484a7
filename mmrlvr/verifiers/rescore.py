"""`mmrlvr score`: re-score saved rollouts offline, line by line, in input order.

Input lines: {"id", "verifier", "completion", "reference", "meta"?}. Output lines: the input plus
"score", "reason", "parts". A malformed line is reported on stderr with its line number and why;
the other lines are still scored.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from mmrlvr.types import Sample

BLOCK = 1024  # lines scored together: bounds memory, keeps the pool busy


def parse_line(text: str) -> dict:
    """One input row, validated; raises ValueError saying what is wrong."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    for key in ("verifier", "completion", "reference"):
        if key not in row:
            raise ValueError(f"missing field {key!r}")
    if not isinstance(row["verifier"], str) or not row["verifier"]:
        raise ValueError("field 'verifier' must be a non-empty string")
    if not isinstance(row["completion"], str):
        raise ValueError("field 'completion' must be a string")
    if not isinstance(row.get("meta", {}), dict):
        raise ValueError("field 'meta' must be an object")
    return row


def _score_block(block: list, scorer, specs_ok: dict, report) -> list:
    by_spec = defaultdict(list)
    for k, (lineno, row) in enumerate(block):
        by_spec[row["verifier"]].append(k)
    results: list = [None] * len(block)
    for spec, idx in by_spec.items():
        if spec not in specs_ok:
            try:
                from mmrlvr.verifiers.pool import portable_spec

                portable_spec(spec)
                specs_ok[spec] = None
            except Exception as exc:  # noqa: BLE001 - a bad name is the line's fault, not a crash
                specs_ok[spec] = f"verifier {spec!r}: {exc}"
        if specs_ok[spec] is not None:
            for k in idx:
                report(block[k][0], specs_ok[spec])
            continue
        samples = [
            Sample(id=str(block[k][1].get("id", block[k][0])), messages=(), reference=block[k][1]["reference"],
                   verifier=spec, meta=block[k][1].get("meta") or {})
            for k in idx
        ]
        verdicts = scorer(spec, [block[k][1]["completion"] for k in idx], samples)
        for k, v in zip(idx, verdicts):
            results[k] = {**block[k][1], "score": v.score, "reason": v.reason, "parts": v.parts}
    return results


def score_file(input_path: str | Path, output_path: str | Path, scorer, progress: bool = True) -> tuple[int, int]:
    """Score every line; returns (lines scored, lines bad)."""
    input_path = Path(input_path)
    lines = input_path.read_text(encoding="utf-8", errors="replace").splitlines()
    bad = 0

    def report(lineno: int, why: str) -> None:
        nonlocal bad
        bad += 1
        print(f"{input_path}:{lineno}: {why}", file=sys.stderr)

    from tqdm import tqdm

    done, specs_ok = 0, {}
    with open(output_path, "w", encoding="utf-8") as out, tqdm(
        total=len(lines), disable=not progress, unit="line", file=sys.stderr
    ) as bar:
        for start in range(0, len(lines), BLOCK):
            block = []
            for lineno, text in enumerate(lines[start : start + BLOCK], start=start + 1):
                if not text.strip():
                    continue
                try:
                    block.append((lineno, parse_line(text)))
                except ValueError as exc:
                    report(lineno, str(exc))
            for row in _score_block(block, scorer, specs_ok, report):
                if row is not None:
                    out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                    done += 1
            bar.update(min(BLOCK, len(lines) - start))
    return done, bad
