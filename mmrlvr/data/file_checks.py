"""Checks on a raw data file before `datasets` reads it, each naming the line to fix.

`datasets` reports neither an empty file, nor the line of a CSV quote that never closes (it merges
the rows after it into one cell), nor the line of a bad JSONL row; `mmrlvr.data.io` runs these on
the files it loads (and re-exports them), and turns what they find into a `DataError`.
"""

from __future__ import annotations


def _has_content(path: str) -> bool:
    """Whether a text file holds anything but whitespace (reads at most until the first byte)."""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def unclosed_quote_line(path: str) -> int | None:
    """The line where a CSV quote opens that never closes (1-based), else None.

    A doubled quote ("") inside a quoted cell is an escaped quote and toggles twice; a quoted cell
    may span lines. Without this check an unterminated quote silently merges rows."""
    inside, opened = False, None
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            for _ in range(raw.count(b'"')):
                inside = not inside
                if inside:
                    opened = n
    return opened if inside else None


def first_bad_jsonl_line(path: str) -> str | None:
    """"FILE: line N: why" for the first line that is not UTF-8 or not a JSON object, else None."""
    import json

    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                return f"{path}: line {n}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1})"
            except ValueError as exc:
                return f"{path}: line {n}: not valid JSON ({str(exc)[:120]})"
            if not isinstance(row, dict):
                return f"{path}: line {n}: not a JSON object"
    return None
