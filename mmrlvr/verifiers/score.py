"""Run verifiers over many completions: in worker processes with a time bound, or in-process."""

from __future__ import annotations

from typing import Sequence

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import check_allowed, resolve_verifier, safe_verify
from mmrlvr.verifiers.failures import FailureCounter


class InProcessScorer:
    """Scores in this process: fastest, every exception caught, but no time bound on a plain call
    (an `async def` verifier's await is bounded by `timeout`).

    For verifiers known to be quick and total (the counting task's `count`); anything that parses
    math or runs user code belongs in a `VerifierPool`.
    """

    def __init__(self, plugins=None, timeout: float | None = None):
        # the plug-in specs the user named, which data may name; None: the caller checked
        self.plugins = None if plugins is None else tuple(plugins)
        self.timeout = timeout  # bounds an `async def` verifier's await (a plain call cannot be bounded here)
        self._fns: dict = {}
        self.failures = FailureCounter()  # per verifier: failed verdicts, warned past a small share

    def __call__(self, spec: str, completions: Sequence[str], samples: Sequence) -> list[Verdict]:
        fn = self._fns.get(spec)
        if fn is None:
            if self.plugins is not None:
                check_allowed(spec, self.plugins)
            fn = self._fns[spec] = resolve_verifier(spec)
        out = [safe_verify(fn, c, s, self.timeout) for c, s in zip(completions, samples)]
        self.failures.record(spec, out)
        return out

    def close(self) -> None:
        pass


def make_scorer(timeout: float = 5.0, workers: int = 2, plugins=None):
    """A `VerifierPool` (workers > 0, time-bounded) or an `InProcessScorer` (workers == 0).

    `plugins`: the "file.py:fn" / "module:fn" specs the user named (command line, config
    `rewards:`); any other plug-in spec, e.g. one named by a data row, is refused. None: the
    caller has checked every spec it passes.
    """
    if workers <= 0:
        return InProcessScorer(plugins, timeout)
    from mmrlvr.verifiers.pool import VerifierPool

    return VerifierPool(timeout=timeout, workers=workers, plugins=plugins)
