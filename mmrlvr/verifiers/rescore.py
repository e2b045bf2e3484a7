"""`mmrlvr score`: re-score saved rollouts offline, line by line, in input order.

Input lines: {"id", "verifier", "completion", "reference", "meta"?}. Output lines: the input plus
"score", "reason", "parts". Lines are split on "\\n" only, so a row holding U+2028, U+2029 or
U+0085 inside a string is one row, and every line number printed is the file's own. A malformed
or non-UTF-8 line is reported on stderr as `file:line: why`; the other lines are still scored. A
row whose reference is unusable scores 0 with a "bad reference" reason and is counted apart.
The output is strict JSON (no bare NaN/Infinity), so scoring it again gives the same rows.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from mmrlvr.types import Sample
from mmrlvr.verifiers.base import BAD_REFERENCE, VERIFIER_FAILED, UntrustedVerifier

BLOCK = 1024  # lines scored together: bounds memory, keeps the pool busy
BLOCK_BYTES = 32 << 20  # ... and at most this many bytes of input lines (90 lines of 10 MB are 900 MB)
MAX_FAILURE_LINES = 20  # verifier failures printed one by one; the summary counts them all


@dataclass
class ScoreCounts:
    scored: int = 0  # rows written to the output (bad references included)
    bad_lines: int = 0  # rows not scored: not UTF-8, not JSON, missing fields, unknown verifier
    bad_references: int = 0  # rows scored 0 because their reference is unusable
    failed: int = 0  # rows scored 0 because the verifier failed (timed out, raised, died, NaN...)


def decode_line(raw: bytes, lineno: int) -> str:
    """A raw line as text; raises ValueError naming the first byte that is not UTF-8."""
    if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a byte-order mark written by some editors
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)") from None


def parse_line(text: str, default_verifier: str | None = None) -> dict:
    """One input row, validated; raises ValueError saying what is wrong."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if default_verifier is not None:
        row.setdefault("verifier", default_verifier)
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


def strict_json(obj):
    """`obj` with every non-finite float written as the string "NaN", "Infinity" or "-Infinity".

    Python's json writes bare NaN, which is not JSON; the strings read back as the same floats
    wherever a verifier calls float() on them, so a re-score gives the same verdict.
    """
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def _score_block(block: list, scorer, specs_ok: dict, report, plugins) -> list:
    by_spec = defaultdict(list)
    for k, (lineno, row) in enumerate(block):
        by_spec[row["verifier"]].append(k)
    results: list = [None] * len(block)
    for spec, idx in by_spec.items():
        if spec not in specs_ok:
            try:
                from mmrlvr.verifiers.pool import portable_spec

                portable_spec(spec, plugins)
                specs_ok[spec] = None
            except Exception as exc:  # noqa: BLE001 - a bad name is the line's fault, not a crash
                text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                specs_ok[spec] = text if isinstance(exc, UntrustedVerifier) else f"verifier {spec!r}: {text}"
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
            results[k] = (block[k][0], {**block[k][1], "score": v.score, "reason": v.reason, "parts": v.parts})
    return results


def check_paths(input_path: str | Path, output_path: str | Path) -> None:
    """Raise ValueError (one line) when the input cannot be read or the output cannot be written."""
    src, dst = Path(input_path), Path(output_path)
    if not src.exists():
        raise ValueError(f"input {src}: no such file")
    if src.is_dir():
        raise ValueError(f"input {src}: is a directory, not a JSONL file")
    if dst.is_dir():
        raise ValueError(f"output {dst}: is a directory; give a file name")
    if dst.exists() and dst.resolve() == src.resolve():
        raise ValueError(f"output {dst}: is the input file; writing it would destroy the input")


def score_file(input_path: str | Path, output_path: str | Path, scorer, progress: bool = True,
               default_verifier: str | None = None, plugins=()) -> ScoreCounts:
    """Score every line of `input_path` into `output_path`; return the counts."""
    input_path = Path(input_path)
    check_paths(input_path, output_path)
    counts = ScoreCounts()

    def report(lineno: int, why: str) -> None:
        counts.bad_lines += 1
        print(f"{input_path}:{lineno}: {why}", file=sys.stderr)

    def flush(block: list, out) -> None:
        for item in _score_block(block, scorer, specs_ok, report, plugins):
            if item is None:
                continue
            lineno, row = item
            if row["reason"].startswith(BAD_REFERENCE):
                counts.bad_references += 1
                print(f"{input_path}:{lineno}: {row['reason']}", file=sys.stderr)
            elif row["reason"].startswith(VERIFIER_FAILED):
                counts.failed += 1
                if counts.failed <= MAX_FAILURE_LINES:  # a verifier failing everywhere: not 10^6 lines
                    print(f"{input_path}:{lineno}: {row['reason']}", file=sys.stderr)
            out.write(json.dumps(strict_json(row), ensure_ascii=False, allow_nan=False, default=str) + "\n")
            counts.scored += 1

    from tqdm import tqdm

    specs_ok: dict = {}
    with open(input_path, "rb") as src, open(output_path, "w", encoding="utf-8") as out, tqdm(
        total=input_path.stat().st_size, disable=not progress, unit="B", unit_scale=True, file=sys.stderr
    ) as bar:
        block: list = []
        held = 0  # bytes of the lines in `block`
        for lineno, raw in enumerate(src, start=1):  # binary lines end at b"\n" only
            bar.update(len(raw))
            try:
                text = decode_line(raw, lineno)
                if text.strip():
                    block.append((lineno, parse_line(text, default_verifier)))
                    held += len(raw)
            except ValueError as exc:
                report(lineno, str(exc))
            if len(block) >= BLOCK or held >= BLOCK_BYTES:
                flush(block, out)
                block, held = [], 0
        flush(block, out)
    return counts
