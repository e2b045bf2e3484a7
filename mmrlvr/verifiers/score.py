"""Run verifiers over many completions: resolved once, each call guarded by `safe_verify`."""

from __future__ import annotations

from typing import Sequence

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import resolve_verifier, safe_verify


class InProcessScorer:
    """Scores in this process. Fast, but a verifier that hangs would hang the step."""

    def __init__(self):
        self._fns: dict = {}

    def __call__(self, spec: str, completions: Sequence[str], samples: Sequence) -> list[Verdict]:
        fn = self._fns.get(spec)
        if fn is None:
            fn = self._fns[spec] = resolve_verifier(spec)
        return [safe_verify(fn, c, s) for c, s in zip(completions, samples)]

    def close(self) -> None:
        pass


def make_scorer(timeout: float | None = None):
    """The scorer the loop uses."""
    return InProcessScorer()
