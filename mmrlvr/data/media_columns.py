"""Columns that hold media no column key maps: named before the model loads, never dropped.

A task reads images (and `generic` videos) only from the column its `image` / `video` key maps;
every other column is passed on as text in `sample.meta["columns"]`. A column of image paths,
image bytes or PIL images that no key maps would leave every sample without its picture, and
training would run on the text alone. So such a column is refused with one line that names it, a
value from it and the mapping that reads it. We refuse rather than map it ourselves: a guess
could pick the wrong one of two picture columns, and the fix is one config line.
"""

from __future__ import annotations

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v")
LOOK_AT = 32  # rows whose values decide whether a text column holds paths


def _path_kind(value) -> str | None:
    """"image" / "video" for a path (or a list of paths) with a media suffix, else None."""
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) for v in items):
        return None
    ends = {("image" if v.strip().lower().endswith(IMAGE_SUFFIXES) else
             "video" if v.strip().lower().endswith(VIDEO_SUFFIXES) else None) for v in items}
    return ends.pop() if len(ends) == 1 else None


def media_kind(ds, column: str) -> tuple[str, str | None] | None:
    """(kind, an example path, or None for image data) when `column` of `ds` holds images or videos, else None.

    Image features, raw bytes and `{bytes, path}` structs are images; a text column (or a list of
    text) is media when every non-empty value among its first rows is a path with a media suffix."""
    feature = repr(ds.features[column])
    if "Image(" in feature or "binary" in feature or ("'bytes'" in feature and "'path'" in feature):
        return "image", None
    if "Video(" in feature:
        return "video", None
    if "string" not in feature:
        return None
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    values = [v for v in table.column(column).slice(0, LOOK_AT).to_pylist() if v not in (None, "", [])]
    kinds = {_path_kind(v) for v in values}
    if len(kinds) == 1 and None not in kinds:
        return kinds.pop(), values[0]
    return None


def unmapped_media(ds, claimed: set[str], keys: dict, source: str, task_keys: set[str]) -> str | None:
    """The one line naming the first column of media no key claims, else None.

    `claimed`: the columns the task's keys resolved to; `task_keys`: the task's column keys (a
    task without a `video` key cannot read a video column at all)."""
    for column in ds.column_names:
        if column in claimed:
            continue
        found = media_kind(ds, column)
        if found is None:
            continue
        kind, example = found
        what = f"{example[:60]!r} in its first rows" if example else f"{kind} data, not paths"
        where = f"{source}: column {column!r} holds {kind}s ({what}) that no column key reads"
        if kind not in task_keys:
            return f"{where}; this task reads no {kind}s: drop the column, or use a task that does (generic reads videos)"
        if keys.get(kind) is not None:
            return (f"{where}, so they would be dropped; the task's {kind} comes from column {keys[kind]!r}: drop "
                    f"{column!r} from the data, or set task.args.columns.{kind}: {column} to read it instead")
        return f"{where}, so every sample would train without them; set task.args.columns.{kind}: {column}"
    return None
