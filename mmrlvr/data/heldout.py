"""Held-out splits: which rows of a file are held out (`split_positions`), and a word on small ones,
printed wherever a held-out result is.

With 3 held-out rows (10% of a 30-row file) one answer moves accuracy by 33 points, so a "-20.0
points" headline is noise. Below `SMALL_SPLIT` rows the result is printed with this note, once,
and only where its advice applies: rows held out of a data file (`is_generated` says which splits
are a task's own draw instead, whose size is simply `task.eval_size`).
"""

from __future__ import annotations

SMALL_SPLIT = 30


def small_split_note(n: int | None) -> str:
    """"" for a split of SMALL_SPLIT rows or more, else a short warning in round brackets (leading space)."""
    if n is None or n >= SMALL_SPLIT:
        return ""
    step = 100.0 / n if n else float("inf")
    # round brackets: rich (the progress console) would swallow "[...]" as markup
    return (f" (only {n} held-out rows: one answer moves accuracy by {step:.0f} points; "
            f"use eval_data or a larger holdout_frac for >= {SMALL_SPLIT})")


def is_generated(split) -> bool:
    """Whether a loaded split is the task's own draw (boards, charts, clips it builds) rather than rows
    of a data file: readers return `TaskSamples` (the file's rows, its source and bad rows), builders
    a plain list. Decided by what the task returned, so a task that reads a file when given one and
    draws its samples otherwise (geometry, chart, grounding) is judged by the run at hand."""
    from mmrlvr.data.io import TaskSamples

    return not isinstance(split, TaskSamples)


def split_positions(n: int, split: str, size: int | None, seed: int, eval_data: bool,
                    holdout_frac: float = 0.1, max_holdout: int = 512) -> list[int]:
    """Row positions of a split: the whole file when eval has its own file, else a seeded
    held-out slice (`holdout_frac`, at most `max_holdout`, at least one row) and the rest."""
    import random

    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    order = list(range(n))
    if eval_data:
        chosen = order
    else:
        random.Random(f"holdout-{seed}").shuffle(order)
        k = max(1, min(max_holdout, int(round(holdout_frac * n)))) if n > 1 and holdout_frac > 0 else 0
        chosen = sorted(order[:k]) if split == "eval" else sorted(order[k:])
    return chosen[:size] if size else chosen
