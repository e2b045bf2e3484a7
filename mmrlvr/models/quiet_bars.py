"""Third-party progress bars (datasets' "Map" and "Generating train split", huggingface_hub's
downloads, transformers' "Loading weights") silenced while a run shows its own.

A run's output is our bar and our lines; a screenful of library bars for a cached JSON file hides
them. `quiet_third_party_bars()` turns the libraries' bars off for its duration and puts back what
was on before, so a script that calls `mmrlvr.run` keeps its own settings afterwards.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


def _switches() -> list[tuple[Callable[[], bool], Callable[[], None], Callable[[], None]]]:
    """(is it on, turn off, turn on) for each library that is installed."""
    out = []
    with contextlib.suppress(ImportError):
        import datasets

        out.append((datasets.is_progress_bar_enabled, datasets.disable_progress_bars, datasets.enable_progress_bars))
    with contextlib.suppress(ImportError):
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        out.append((lambda: not are_progress_bars_disabled(), disable_progress_bars, enable_progress_bars))
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as hf_logging

        out.append((hf_logging.is_progress_bar_enabled, hf_logging.disable_progress_bar, hf_logging.enable_progress_bar))
    return out


@contextlib.contextmanager
def quiet_third_party_bars() -> Iterator[None]:
    """Library progress bars off inside the block; each one that was on is on again after it."""
    was_on = []
    for is_on, off, on in _switches():
        if is_on():
            was_on.append(on)
        off()
    try:
        yield
    finally:
        for on in was_on:
            on()
