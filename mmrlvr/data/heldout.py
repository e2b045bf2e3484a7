"""A word on small held-out splits, printed wherever a held-out result is.

With 3 held-out rows (10% of a 30-row file) one answer moves accuracy by 33 points, so a "-20.0
points" headline is noise. Below `SMALL_SPLIT` rows the result is printed with this note.
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
