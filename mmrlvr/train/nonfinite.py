"""The error a run stops with when its updates keep coming out non-finite.

Its own module, free of torch, so the CLI can name it in its one-line handler without loading the
learner for commands that never train."""

from __future__ import annotations


class NonFiniteUpdateError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient (`train.max_nonfinite_steps`)."""
