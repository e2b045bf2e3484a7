"""Count verdicts where the verifier itself failed, and say so when it happens too often.

A verifier that hangs, raises, dies or returns NaN scores 0 on that item, which looks exactly
like a wrong answer in the reward curve. A run whose verifier fails on most items learns nothing
and says nothing, so every scorer counts failures per verifier and warns (once per verifier, on
the `mmrlvr.verifiers` logger, which prints to stderr) as soon as more than `max(1, share x items)` of its verdicts failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import VERIFIER_FAILED

log = logging.getLogger("mmrlvr.verifiers")
FAIL_SHARE = 0.05  # more failed verdicts than this share of a verifier's items (and more than 1): warn


@dataclass
class SpecCount:
    items: int = 0
    failed: int = 0
    first: str = ""  # the first failure's reason, for the warning
    warned: bool = False


@dataclass
class FailureCounter:
    """Per verifier spec: items scored, failed verdicts, and whether the warning was given."""

    share: float = FAIL_SHARE
    warn: object = None  # callable(str); None: the `mmrlvr.verifiers` logger (stderr unless configured)
    counts: dict = field(default_factory=dict)

    def record(self, spec: str, verdicts: Iterable[Verdict]) -> None:
        c = self.counts.setdefault(spec, SpecCount())
        for v in verdicts:
            c.items += 1
            if v.reason.startswith(VERIFIER_FAILED):
                c.failed += 1
                c.first = c.first or v.reason[len(VERIFIER_FAILED):]
        if not c.warned and too_many(c.failed, c.items, self.share):
            c.warned = True
            self._say(f"verifier {spec!r} failed on {c.failed} of {c.items} items "
                      f"({100 * c.failed / c.items:.0f}%; first: {c.first[:160]}); its failures score 0, "
                      "as a wrong answer would: fix the verifier or raise verifier_timeout")

    def _say(self, msg: str) -> None:
        if self.warn is not None:
            self.warn(msg)
            return
        log.warning("mmrlvr: warning: %s", msg)

    def total_failed(self) -> int:
        return sum(c.failed for c in self.counts.values())


def too_many(failed: int, items: int, share: float = FAIL_SHARE) -> bool:
    """More failures than a small share: `failed > max(1, share * items)` (one stray one is noise)."""
    return failed > max(1.0, share * items)
