"""Format verifier: a completion is thinking followed by an answer and nothing else."""

from __future__ import annotations

import re

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import register_verifier

_FORMAT = re.compile(r"\s*<think>(?:(?!</?think>|</?answer>).)*</think>\s*<answer>(?:(?!</?answer>|</?think>).)*</answer>\s*", re.S)


@register_verifier("format", "1 for <think>...</think> then <answer>...</answer> and nothing else")
def format_(completion: str, sample=None) -> Verdict:
    """Exactly one think block followed by exactly one answer block."""
    ok = _FORMAT.fullmatch(completion[:100_000]) is not None and len(completion) <= 100_000
    return Verdict(float(ok), "well formed" if ok else "not <think>..</think><answer>..</answer>")
