"""One loader for task rows: JSONL, JSON, CSV, Parquet, `save_to_disk` directories, hub names.

Everything goes through `datasets` (Arrow, memory-mapped), so a 100k-row Parquet file with
embedded images costs its index, not its pixels: image cells become references (`RowRef` or a
resolved path) that `mmrlvr.data.media.load_image` decodes when the batch is encoded.

A task gives a column mapping (its field -> a dataset column, or a list of candidate columns, the
first present one is used) and a function that turns one row into a `Sample` or raises `BadRow`.
Bad rows are reported once each with the file and 0-based row index and skipped; past
`max_bad_frac` the build stops with a `DataError` naming the file, the count and the first rows.
A data row only ever supplies data: which verifier, template and code run is the task's choice.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mmrlvr.data.file_checks import _has_content, first_bad_jsonl_line, unclosed_quote_line
from mmrlvr.data.literal_text import forged_in_sample
from mmrlvr.data.media import RowRef
from mmrlvr.data.staged import shown
from mmrlvr.types import Sample

log = logging.getLogger("mmrlvr.data")

EXTRA = "column:"  # Row.fields key prefix of the data's own columns no task field claims (data.qa)
FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


class DataError(ValueError):
    """A dataset that cannot be used: missing file or column, or too many bad rows."""


class BadRow(ValueError):
    """Raised by a task's row function: the row is reported (file, index, reason) and skipped."""


class TaskSamples(list):
    """A task split's samples, its skipped rows (`[{"row", "reason"}]`) and its file's bad-row count."""

    def __init__(self, samples: Iterable[Sample] = (), skipped: Sequence[dict] = (), source: str = "",
                 rows: int | None = None, bad: Sequence[dict] = (), max_bad_frac: float | None = None):
        super().__init__(samples)
        self.skipped, self.source = list(skipped), source  # this split's bad rows
        self.rows, self.bad, self.max_bad_frac = rows, list(bad), max_bad_frac  # the whole file's (bad_rows.py)


@dataclass
class Row:
    """One dataset row as a task sees it: mapped fields, and image references in cell order."""

    index: int  # 0-based row index in the data file
    fields: dict  # task field -> value (image fields excluded)
    images: list  # references: resolved path strings or RowRefs; [] when the row has none


def open_dataset(spec: str, split: str = "train", cache_dir: str | None = None):
    """A `datasets.Dataset` from a file, a directory of files, a `save_to_disk` dir or a hub name.

    `name@split` picks a split of a hub dataset or a saved DatasetDict (`hiyouga/geometry3k@test`).
    """
    import datasets

    if "@" in spec and not Path(os.path.expanduser(spec)).exists():
        spec, split = spec.rsplit("@", 1)
    path = Path(os.path.expanduser(spec))
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            ds = datasets.load_from_disk(str(path))
            return _pick_split(ds, split, spec)
        files = sorted(p for p in path.iterdir() if p.suffix in FORMATS)
        if not files:
            raise DataError(f"{spec}: a directory without a saved dataset or data files ({', '.join(FORMATS)})")
        return _load_files([str(f) for f in files], files[0].suffix, cache_dir, spec)
    if path.suffix in FORMATS:
        if not path.exists():
            raise DataError(f"{spec}: file not found")
        return _load_files([str(path)], path.suffix, cache_dir, spec)
    if path.exists():
        raise DataError(f"{spec}: unknown data format {path.suffix!r}; known: {', '.join(FORMATS)}")
    if spec.count("/") == 1 and not spec.startswith((".", "/")):  # a hub name: "owner/name"
        try:
            return datasets.load_dataset(spec, split=split, cache_dir=cache_dir)
        except Exception as exc:  # noqa: BLE001 - no network, unknown name, gated dataset ...
            raise DataError(f"{spec}: not a local path, and loading it from the hub failed: {exc}") from None
    raise DataError(f"{spec}: file not found")


def _load_files(files: list[str], suffix: str, cache_dir, spec: str):
    import datasets

    import pyarrow as pa

    for f in files:
        if suffix in (".jsonl", ".csv", ".json") and not _has_content(f):
            raise DataError(f"{f}: empty file (no rows)")
        if suffix == ".csv" and (line := unclosed_quote_line(f)) is not None:
            raise DataError(f"{f}: line {line}: a quote opened here never closes (a quote missing on this line "
                            "or an earlier one); the CSV reader would merge the rows after it into one cell")
    try:
        ds = datasets.load_dataset(FORMATS[suffix], data_files=files, split="train", cache_dir=cache_dir)
    except Exception as exc:  # noqa: BLE001 - malformed JSON/CSV/Parquet: name the file
        where = next((w for f in files if suffix == ".jsonl" and (w := first_bad_jsonl_line(f))), None)
        if where is not None:  # the datasets error names no line; this does
            raise DataError(where) from None
        from mmrlvr.data.csv_types import mixed_cell, root_message

        why = root_message(exc)
        cell = next((f"{f}: {c}" for f in files if suffix == ".csv" and (c := mixed_cell(f, why))), None)
        raise DataError(cell or f"{spec}: cannot read as {FORMATS[suffix]}: {why}") from None
    # the first load converts the file into a memory-mapped Arrow cache; give back the buffers
    # the conversion used, or Arrow's allocator keeps them (hundreds of MB for image columns)
    pa.default_memory_pool().release_unused()
    return ds


def _pick_split(ds, split: str, spec: str):
    import datasets

    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"{spec}: no split {split!r}; splits: {', '.join(ds)}")
        return ds[split]
    return ds


def resolve_columns(names: Sequence[str], mapping: dict, spec: str, required: Sequence) -> dict:
    """Task field -> existing column. Mapping values are a column or a list of candidates.

    A `required` entry is a field, or a tuple of fields one of which must have a column (a question
    or a prompt; the first is the one to set). Every one without a column is named in one line,
    with the file's columns."""
    out = {}
    for field_name, want in mapping.items():
        if not (want is None or isinstance(want, str) or
                (isinstance(want, (list, tuple)) and all(isinstance(c, str) for c in want))):
            raise DataError(f"task.args.columns.{field_name}: expected a column name or a list of names, "
                            f"got {str(want)[:60]!r}")
        found = next((c for c in _candidates(want) if c in names), None)
        if found is not None:
            out[field_name] = found
    missing, keys = [], []
    for need in dict.fromkeys(required):
        group = [f for f in (need if isinstance(need, tuple) else (need,)) if f in mapping]
        if group and not any(f in out for f in group):
            looked = ", ".join(repr(c) for f in group for c in _candidates(mapping[f]))
            missing.append(f"no column for {' or '.join(map(repr, group))} (looked for {looked})")
            keys.append(f"task.args.columns.{group[0]}")
    if missing:
        raise DataError(f"{shown(spec)}: {'; '.join(missing)}; columns: {', '.join(names)}; set {', '.join(keys)}")
    return out


def _candidates(want) -> list[str]:
    return [want] if isinstance(want, str) else list(want or [])


def _chunk_cells(arr) -> list:
    """Per row of an Arrow array: a path, a byte count, {"bytes": n|None, "path": p}, or a list.

    Only offsets, validity bitmaps and path strings are read; image bytes are never touched.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    nulls = arr.is_null().to_pylist()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = arr.value_lengths().to_pylist()
        flat = _chunk_cells(arr.flatten())
        out, pos = [], 0
        for n, is_null in zip(lengths, nulls):
            out.append(None if is_null else flat[pos : pos + (n or 0)])
            pos += 0 if is_null else (n or 0)
        return out
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        sizes = pc.binary_length(arr.field("bytes")).to_pylist() if "bytes" in names else [None] * len(arr)
        paths = arr.field("path").to_pylist() if "path" in names else [None] * len(arr)
        return [None if z else {"bytes": b, "path": p} for z, b, p in zip(nulls, sizes, paths)]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.binary_length(arr).to_pylist()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.to_pylist()
    if pa.types.is_null(t):
        return [None] * len(arr)
    raise DataError(f"image column has type {t}; expected paths, bytes, {{bytes, path}} structs or lists of them")


def image_cells(ds, column: str) -> list:
    """`_chunk_cells` over a whole (memory-mapped) column, chunk by chunk (no copies)."""
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    out: list = []
    for chunk in table.column(column).chunks:
        out.extend(_chunk_cells(chunk))
    return out


def _refs(cell, ds, row: int, column: str, root: str | None, source: str) -> list:
    """References for one row's image cell; raises BadRow for a missing or empty image."""
    items = cell if isinstance(cell, list) else [cell]
    index_of = (lambda j: j) if isinstance(cell, list) else (lambda j: None)
    refs = []
    for j, item in enumerate(items):
        where = f"image {j + 1}" if isinstance(cell, list) else "image"
        if item is None:
            raise BadRow(f"{where} is missing")
        if isinstance(item, dict):
            if item["bytes"]:
                item = int(item["bytes"])
            elif item["path"]:
                item = str(item["path"])
            elif item["bytes"] == 0:
                raise BadRow(f"{where} has empty bytes")
            else:
                raise BadRow(f"{where} has neither bytes nor a path")
        if isinstance(item, int):
            if item == 0:
                raise BadRow(f"{where} has empty bytes")
            refs.append(RowRef(ds, row, column, index_of(j), source, root))
            continue
        path = Path(os.path.expanduser(item))
        path = path if path.is_absolute() or root is None else Path(root) / path
        if not row_file_exists(path, where):
            hint = "" if Path(os.path.expanduser(item)).is_absolute() else \
                " (relative paths start from task.args.image_root, by default the data file's folder)"
            raise BadRow(f"{where} file not found: {str(path)[:300]}{hint}")
        refs.append(str(path))
    return refs


def row_file_exists(path: Path, where: str) -> bool:
    """Whether a row's media path names a file; a path the file system cannot even look up (a name past
    its length limit, a NUL byte) is that row's fault: a `BadRow` naming the field, never the load's end."""
    try:
        return path.is_file()
    except (OSError, ValueError) as exc:
        raise BadRow(f"{where} is not a usable path ({type(exc).__name__}: {str(exc)[:60]}...; "
                     f"{len(str(path)):,} characters)") from None


def read_rows(spec: str, columns: dict, required: Sequence[str] = (), image_field: str = "image",
              image_root: str | None = None, split: str = "train", cache_dir: str | None = None,
              images_optional: bool = False):
    """(source name, dataset, rows): every row as a `Row`, or a (index, reason) pair if bad.

    `image_root` resolves relative image paths; by default the data file's own folder. With
    `images_optional` an empty image cell is a row without images (the generic task's video rows).
    """
    from mmrlvr.data.media_columns import unmapped_media

    ds = open_dataset(spec, split, cache_dir)
    cols = resolve_columns(ds.column_names, columns, spec, required)
    keys = {k for k in columns if not k.startswith(EXTRA)}  # the task's own column keys (image, video, ...)
    if (media := unmapped_media(ds, set(cols.values()), cols, shown(spec), keys)) is not None:
        raise DataError(media)  # a picture column no key reads would leave every sample without it
    root = image_root
    if root is None and Path(spec).exists():
        root = str(Path(spec).parent if Path(spec).is_file() else Path(spec))
    img_col = cols.get(image_field)
    cells = None
    if img_col is not None:
        cells = image_cells(ds, img_col)
        raw = ds.with_format("arrow")  # RowRefs read the stored cell (bytes/path), never a decoded image
    text_cols = {f: c for f, c in cols.items() if f != image_field}
    values, undecodable = _text_values(ds, sorted(set(text_cols.values())))
    rows: list = []
    for i in range(len(ds)):
        if i in undecodable:
            rows.append((i, undecodable[i]))
            continue
        fields = {f: values[c][i] for f, c in text_cols.items()}
        try:
            empty = cells is None or (images_optional and cells[i] is None)
            refs = [] if empty else _refs(cells[i], raw, i, img_col, root, spec)
            rows.append(Row(i, fields, refs))
        except BadRow as exc:
            rows.append((i, str(exc)))
    return spec, ds, rows


def _text_values(ds, columns: list[str]) -> tuple[dict, dict[int, str]]:
    """({column: python values}, {row: why}) - Arrow keeps bytes that are not UTF-8 (a Latin-1
    "é" in a JSONL file) in string columns and only fails when they are read; such a row is bad,
    named with its field, instead of aborting the whole load."""
    if not columns:
        return {}, {}
    try:
        return ds.select_columns(columns).to_dict(), {}
    except UnicodeDecodeError:
        pass
    import pyarrow as pa

    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    values, bad = {}, {}
    for col in columns:
        try:
            values[col] = ds.select_columns([col]).to_dict()[col]
            continue
        except UnicodeDecodeError:
            pass
        if not (pa.types.is_string(table.column(col).type) or pa.types.is_large_string(table.column(col).type)):
            values[col] = _nested_values(table.column(col), col, bad)  # a list or struct with a bad byte inside
            continue
        out = []
        for i, raw in enumerate(table.column(col).cast(pa.large_binary()).to_pylist()):
            try:
                out.append(None if raw is None else raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                out.append(None)
                bad.setdefault(i, f"field {col!r}: not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the cell)")
        values[col] = out
    return values, bad


def _nested_values(column, col: str, bad: dict[int, str]) -> list:
    """A nested column's values row by row: a row whose value holds bytes that are not UTF-8 is
    None and named bad with its field (the other rows keep theirs)."""
    out = []
    for i in range(len(column)):
        try:
            out.append(column.slice(i, 1).to_pylist()[0])
        except UnicodeDecodeError:
            out.append(None)
            bad.setdefault(i, f"field {col!r}: not UTF-8 inside the nested value")
    return out


DEFAULT_BAD_FRAC = 0.01  # unset `max_bad_frac`: 1% of the rows (never less than one row)


def bad_frac(max_bad_frac: float | None, n: int) -> float:
    """The fraction `build_samples` enforces over `n` rows: as set, or unset max(1%, one row)."""
    if max_bad_frac is not None:
        return max_bad_frac
    return max(DEFAULT_BAD_FRAC, 1.0 / n) if n else DEFAULT_BAD_FRAC


def frac_text(frac: float) -> str:
    """A bad-row fraction as printed: three significant digits (unset over 43 rows, 1/43 is
    0.0233, not 0.0232558)."""
    return f"{frac:.3g}"


def build_samples(source: str, rows: Sequence, make: Callable[[Row], Sample], max_bad_frac: float,
                  keep: Sequence[int] | None = None) -> TaskSamples:
    """Turn rows into samples; report each bad row once; stop past `max_bad_frac` bad rows.

    `keep` lists the row positions this split uses (all rows by default). The bad-row fraction is
    computed over the whole file, so train and eval splits agree on whether the data is usable.
    """
    if not isinstance(max_bad_frac, (int, float)) or not 0.0 <= max_bad_frac <= 1.0:  # NaN too
        raise DataError(f"task.args.max_bad_frac={max_bad_frac}: expected a fraction in [0, 1]")
    samples, bad, label = {}, [], shown(source)  # the user's name for rows mmrlvr.run staged
    for pos, row in enumerate(rows):
        if isinstance(row, tuple):
            bad.append({"row": row[0], "reason": row[1]})
            continue
        try:
            samples[pos] = make(row)
            forged = forged_in_sample(samples[pos])
            if forged is not None:
                del samples[pos]
                raise BadRow(f"its text spells the special token {forged!r}, which a prompt must not carry")
        except BadRow as exc:
            bad.append({"row": row.index, "reason": str(exc)})
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as exc:
            # a cell of an unexpected type (`options: 5`, `width: "abc"`): this row's fault, not the file's
            bad.append({"row": row.index, "reason": f"malformed cell ({type(exc).__name__}: {str(exc)[:120]})"})
    n = len(rows)
    if n == 0:
        raise DataError(f"{label}: no rows")
    if not samples:  # with max_bad_frac=1 the fraction check passes, and the run divides by zero later
        first = "; ".join(f"row {b['row']}: {b['reason']}" for b in bad[:5])
        raise DataError(f"{label}: all {n} rows are bad; first: {first}")
    if len(bad) > max_bad_frac * n:
        first = "; ".join(f"row {b['row']}: {b['reason']}" for b in bad[:5])
        raise DataError(
            f"{label}: {len(bad)} of {n} rows are bad (more than max_bad_frac={frac_text(max_bad_frac)}); first: {first}"
        )
    positions = range(n) if keep is None else keep
    wanted = set(positions)
    skipped = [b for b in bad if b["row"] in wanted]
    for b in skipped:  # each row belongs to one split, so each bad row is reported once
        log.warning("%s: row %d skipped: %s", label, b["row"], b["reason"])
    kept = [samples[p] for p in positions if p in samples]
    if not kept:
        raise DataError(f"{label}: this split has no usable rows ({len(positions)} selected, "
                        f"{len(skipped)} of them bad)" + ("; holdout_frac=0 holds out none" if not positions else ""))
    return TaskSamples(kept, skipped, source, rows=n, bad=bad, max_bad_frac=max_bad_frac)

