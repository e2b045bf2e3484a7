"""One rule for rows a run cannot use, at load and at decode, in training and in evaluation.

A row can fail when its file is read (a missing answer, a malformed cell: `io.build_samples`) or
later, when its image or video is decoded for a batch. Both kinds count together against one
limit, `task.max_bad_frac` of the file's rows (unset: 1% of them, never less than one row): the
loader stops when the rows bad at load pass it, and a `BadRows` count carries those rows on so
that every media failure found later is added to them. A Parquet file of 8 rows with one missing
answer and one undecodable image has 2 bad rows, one more than the default allows, whether the
image fails in training or in evaluation.

`task.max_bad_media_frac` (the old separate training limit) and `task.args.max_bad_frac` (the old
load limit) still set it, each with a deprecation line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from mmrlvr.data.io import DataError, bad_frac, frac_text
from mmrlvr.data.staged import shown

OLD_NAMES = ("task.args.max_bad_frac", "task.max_bad_media_frac")


def _values(task: Any) -> dict:
    return {"task.max_bad_frac": getattr(task, "max_bad_frac", None),
            "task.args.max_bad_frac": (getattr(task, "args", None) or {}).get("max_bad_frac"),
            "task.max_bad_media_frac": getattr(task, "max_bad_media_frac", None)}


def max_bad_frac_setting(task: Any) -> tuple[float | None, list[str]]:
    """(the fraction set for a run's task config, deprecation lines): `task.max_bad_frac`, else
    the first old name that is set. None: unset (the loader's default, 1% and at least one row)."""
    values = _values(task)
    notes = [f"{old} is deprecated: use task.max_bad_frac (rows bad at load and rows whose media fail to decode "
             "count together against it)" for old in OLD_NAMES if values[old] is not None]
    return next((v for v in values.values() if v is not None), None), notes


def conflicting_settings(task: Any) -> str | None:
    """One line when the new name and the old ones set different fractions (they are one limit)."""
    given = {k: v for k, v in _values(task).items() if v is not None}
    if len(set(map(repr, given.values()))) <= 1:
        return None
    return f"{', '.join(f'{k}={v!r}' for k, v in given.items())} disagree: they are one limit now; set only task.max_bad_frac"


@dataclass
class BadRows:
    """The unusable rows of one file as a run meets them: those the loader skipped (the whole
    file's, counted once), then each row whose media fail to decode (counted once however often
    it is drawn). `add` raises DataError once they are more than `max_frac * rows`."""

    source: str  # the file (or task) the rows come from, for the error line
    rows: int  # rows in the file, both splits
    max_frac: float  # the fraction in force (resolved: unset is 1% and at least one row)
    at_load: list = field(default_factory=list)  # [{"row", "reason"}] of the whole file
    at_decode: dict = field(default_factory=dict)  # key (row or sample id) -> "which: what failed"

    @classmethod
    def of(cls, samples: Sequence, max_bad_frac: float | None = None) -> BadRows:
        """The count a loaded split starts from: a task's `TaskSamples` carries its file's rows and
        load-time bad rows; any other list of samples is its own file with none bad so far."""
        rows = getattr(samples, "rows", None) or len(samples) or 1
        frac = getattr(samples, "max_bad_frac", None)
        frac = bad_frac(max_bad_frac if frac is None else frac, rows)
        return cls(getattr(samples, "source", "") or "the task's samples", rows, frac,
                   list(getattr(samples, "bad", getattr(samples, "skipped", []))))

    @property
    def total(self) -> int:
        return len(self.at_load) + len(self.at_decode)

    def add(self, key, reason: str) -> None:
        """Count a row whose media failed to decode; stop past the limit, naming the first bad rows."""
        self.record(key, reason)
        self.check()

    def record(self, key, reason: str) -> None:
        """Count a row whose media failed to decode without checking the limit yet (a batch's
        failures are all recorded first, so the error line names every one of them)."""
        self.at_decode.setdefault(key, reason)

    def check(self) -> None:
        """Raise DataError once the rows counted so far are more than the limit allows."""
        if self.total > self.max_frac * self.rows:
            first = [f"row {b['row']}: {b['reason']}" for b in self.at_load[:5]]
            first += list(self.at_decode.values())[: 5 - len(first)]
            raise DataError(
                f"{shown(self.source)}: {self.total} of {self.rows} rows are bad ({len(self.at_load)} at load, "
                f"{len(self.at_decode)} with media that fail to decode; more than task.max_bad_frac="
                f"{frac_text(self.max_frac)}); first: {'; '.join(first)}"
            )
