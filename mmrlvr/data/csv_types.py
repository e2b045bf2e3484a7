"""Where a CSV column changes kind: the row and column behind Arrow's "Failed to parse string".

`datasets` reads a CSV in blocks and fixes each column's type from the first block; a later cell
of another kind ("two" under numbers) stops the load with Arrow's message, which names neither the
column nor the row. This finds them, so the user gets one line to act on.
"""

from __future__ import annotations

import csv
import re

_PARSE = re.compile(r"Failed to parse string: '(.*)' as a scalar of type (\w+)")


def root_message(exc: BaseException) -> str:
    """The innermost message of an exception chain (what `datasets` wraps in DatasetGenerationError)."""
    seen = set()
    while (nxt := exc.__cause__ or exc.__context__) is not None and id(nxt) not in seen:
        seen.add(id(exc))
        exc = nxt
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _fits(cell: str, kind: str) -> bool:
    """Whether `cell` reads as Arrow type `kind` (numbers and booleans; any other kind: yes)."""
    if kind.startswith(("int", "uint", "float", "double")):
        try:
            float(cell)
        except ValueError:
            return False
    if kind == "bool":
        return cell.strip().lower() in ("true", "false")
    return True


def mixed_cell(path: str, message: str) -> str | None:
    """"row N, column 'c': 'two' where the rows before hold int64 ..." for Arrow's parse failure in
    a CSV file, else None (the message is another, or the cell is not found)."""
    m = _PARSE.search(message)
    if not m:
        return None
    value, kind = m.group(1), m.group(2)
    first: dict[str, str] = {}  # each column's first cell: the kind the reader fixed
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        for row, cells in enumerate(reader):
            for col, cell in zip(header, cells):
                first.setdefault(col, cell)
                if cell == value and _fits(first[col], kind):
                    return (f"row {row}, column {col!r}: {value!r} is text where the rows before hold {kind} "
                            "(a column is read as one type); make the column's values one kind, or use JSONL")
    return None
