"""One set of task-argument names and one bad-row policy for image and video tasks.

- Names: `data` (the rows file), `eval_data`, `holdout_frac` (share held out for eval) and
  `max_bad_frac` everywhere; the video tasks' old `annotations` and `eval_frac` still work, with a
  deprecation message naming the new key.
- Bad rows (a missing video, a bad answer index, a broken segment) are reported once each with
  the file and row and skipped, as image rows are; past the limit the build stops with one line.
  Unset, the limit is 1% of the rows but never less than one row, so one bad row in a 30-row file
  does not refuse it; set explicitly (e.g. `max_bad_frac: 0`), it is taken as given.
"""

from __future__ import annotations

import logging
import warnings
from typing import Callable, Sequence

from mmrlvr.data.io import DEFAULT_BAD_FRAC, BadRow, Row, bad_frac, build_samples  # noqa: F401 (re-exported)
from mmrlvr.types import Sample

log = logging.getLogger("mmrlvr.data")
_SAID: set = set()  # deprecation lines already logged (both splits build with the same args)


def renamed(task: str, new: str, new_value, old: str, old_value):
    """The value of `new`, or of its deprecated spelling `old` (said once, naming the new key)."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise ValueError(f"{task}: task.args.{old} and task.args.{new} are the same setting; keep {new}")
    msg = f"{task}: task.args.{old} is deprecated; use task.args.{new} (same meaning)"
    warnings.warn(msg, DeprecationWarning, stacklevel=3)
    if msg not in _SAID:
        _SAID.add(msg)
        log.warning(msg)
    return old_value


def rows_to_samples(source: str, rows: Sequence[tuple[int, dict]], make: Callable[[int, dict], Sample | None],
                    in_split: Callable[[dict], bool], size: int, max_bad_frac: float | None):
    """Samples of the rows in this split (at most `size`), bad rows skipped under the policy.

    `rows` are (1-based line, row); `make` raises BadRow for a bad row. Rows are numbered 0-based
    in messages, as image rows are.
    """
    wrapped = [Row(n - 1, row, []) for n, row in rows]
    keep = [i for i, r in enumerate(wrapped) if in_split(r.fields)]
    samples = build_samples(source, wrapped, lambda r: make(r.index + 1, r.fields), bad_frac(max_bad_frac, len(rows)), keep)
    del samples[size:]
    return samples
