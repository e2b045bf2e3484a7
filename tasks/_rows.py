"""Rows of a JSONL or CSV file read through a task's column mapping (the video tasks' reader).

The image tasks read rows through `mmrlvr.data.io` (Arrow, one schema per file); the video tasks'
rows are small JSONL or CSV files whose rows may differ in their keys (Charades-STA style files
mix `query` and `sentence`), so each row takes the first candidate column it has. A field the task
needs, or one the user mapped in `task.args.columns`, that no row of the file has is named with
the file's columns before any row is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mmrlvr.data.io import DataError, resolve_columns
from mmrlvr.data.staged import row_place
from mmrlvr.jsonl import iter_jsonl


def mapping(defaults: dict, columns: dict | None) -> dict[str, list[str]]:
    """{task field: candidate columns}: the task's defaults with the user's `columns` over them."""
    out = {}
    for field_name, want in {**defaults, **(columns or {})}.items():
        if not (isinstance(want, str) or (isinstance(want, (list, tuple)) and want and all(isinstance(c, str) for c in want))):
            raise DataError(f"task.args.columns.{field_name}: expected a column name or a list of names, "
                            f"got {str(want)[:60]!r}")
        out[field_name] = [want] if isinstance(want, str) else list(want)
    return out


def _raw_rows(path: str | Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """(line, row) of a JSONL or (by suffix) CSV file, and the file's columns in first-seen order."""
    rows, names = [], {}
    if str(path).lower().endswith(".csv"):
        import csv

        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            names = dict.fromkeys(reader.fieldnames or [])
            # line 1 is the header; an empty cell is a missing field, as in the JSONL rows it stands for
            rows = [(n, {k: v for k, v in row.items() if v}) for n, row in enumerate(reader, 2)]
        return rows, list(names)
    for n, row in iter_jsonl(path):
        if not isinstance(row, dict):
            raise ValueError(f"{row_place(path, n)}: not a JSON object")
        names.update(dict.fromkeys(row))
        rows.append((n, row))
    return rows, list(names)


def read_mapped_rows(path: str | Path, columns: dict[str, list[str]], required: Sequence[str],
                     must_have: Sequence[str] = ()) -> list[tuple[int, dict]]:
    """(line number, {task field: value}) of every row; fields a row lacks are left out.

    A `required` field (or one of `must_have`: the keys the user mapped) that no row has stops the
    read with one line naming the columns looked for and the file's columns; a row that lacks a
    `required` field names file:line and the field (an empty CSV cell is a missing field)."""
    rows, names = _raw_rows(path)
    if rows:
        resolve_columns(names, columns, str(path), [*required, *must_have])
    out = []
    for n, row in rows:
        fields = {}
        for field_name, candidates in columns.items():
            found = next((c for c in candidates if c in row), None)
            if found is not None:
                fields[field_name] = row[found]
            elif field_name in required:
                raise ValueError(f"{row_place(path, n)}: missing field {candidates[0]!r}")
        out.append((n, fields))
    return out
