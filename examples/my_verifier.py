"""A user verifier as the docs show it (docs/how-to/your-verifier.md): a function in a file.

Named in a config as `rewards: [{verifier: examples/my_verifier.py:count_in_answer, weight: 1.0}]`.
It scores the integer inside the last <answer>...</answer> against the sample's reference and
reports a `format` part, so `reward/count_in_answer/format` shows up in the metrics.
"""

from __future__ import annotations

import re

from mmrlvr.types import Verdict

_ANSWER = re.compile(r"<answer>\s*(-?\d{1,6})\s*</answer>")


def count_in_answer(completion: str, sample) -> Verdict:
    """1.0 when the last <answer> holds the reference integer; never raises on model output."""
    found = _ANSWER.findall(completion[-2000:])
    if not found:
        return Verdict(0.0, "no <answer>N</answer>", {"format": 0.0})
    right = found[-1].lstrip("+") == str(sample.reference).strip()
    return Verdict(float(right), "exact" if right else f"said {found[-1]}", {"format": 1.0})
