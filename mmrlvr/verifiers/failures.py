"""Count verdicts where the verifier itself failed, and say so when it happens too often.

A verifier that hangs, raises, dies or returns NaN scores 0 on that item, which looks exactly
like a wrong answer in the reward curve. A run whose verifier fails on most items learns nothing
and says nothing, so every scorer counts failures per verifier and warns (once per verifier, on
the `mmrlvr.verifiers` logger, which prints to stderr) as soon as more than `max(1, share x items)` of its verdicts failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import BAD_REFERENCE, VERIFIER_FAILED, is_failure

log = logging.getLogger("mmrlvr.verifiers")
FAIL_SHARE = 0.05  # more failed verdicts than this share of a verifier's items (and more than 1): warn


@dataclass
class SpecCount:
    items: int = 0
    failed: int = 0
    first: str = ""  # the first failure's reason, for the warning
    warned: bool = False
    bad_references: int = 0  # items whose reference is unusable: those prompts can never score
    first_bad_reference: str = ""


STOP_WINDOW = 3  # steps over which `verifier_stop_share` is read


class BrokenRewardError(RuntimeError):
    """A reward term failed on all of a step's items, or on too many over the last steps: training
    on its zeros would learn nothing while looking like a run that trains."""


@dataclass
class FailureCounter:
    """Per verifier spec: items scored, failed verdicts, and whether the warning was given; per
    step (`end_step`), whether a term is broken enough to stop the run."""

    share: float = FAIL_SHARE
    warn: object = None  # callable(str); None: the `mmrlvr.verifiers` logger (stderr unless configured)
    counts: dict = field(default_factory=dict)
    windows: dict = field(default_factory=dict)  # spec -> [(items, failed)] of the last STOP_WINDOW steps
    _at_step: dict = field(default_factory=dict)  # spec -> (items, failed) when the step began

    def begin_step(self) -> None:
        """Start a step's window here: items scored since the last step ended (a held-out
        evaluation between steps) are not this step's, so "failed on all N items" counts its own."""
        self._at_step = {spec: (c.items, c.failed) for spec, c in self.counts.items()}

    def end_step(self, stop_share: float | None) -> str | None:
        """Close one step's window; the one line to stop with if a term failed on every item of
        this step, or on more than `stop_share` of its items over the last `STOP_WINDOW` steps
        (None: never stop, only warn)."""
        broken = None
        for spec, c in self.counts.items():
            items0, failed0 = self._at_step.get(spec, (0, 0))
            step = (c.items - items0, c.failed - failed0)
            self._at_step[spec] = (c.items, c.failed)
            window = self.windows.setdefault(spec, [])
            window.append(step)
            del window[:-STOP_WINDOW]
            if stop_share is None or broken is not None:
                continue
            items, failed = sum(n for n, _ in window), sum(f for _, f in window)
            if step[0] and step[1] == step[0]:
                why = f"on all {step[0]} items of this step"
            elif len(window) == STOP_WINDOW and items and failed / items > stop_share:
                why = f"on {failed} of {items} items over the last {STOP_WINDOW} steps (more than verifier_stop_share={stop_share:g})"
            else:
                continue
            broken = (f"reward {reward_label(spec)} failed {why} (first error: {c.first[:200]}); training on its zeros "
                      "would learn nothing: fix the reward function, or set verifier_stop_share=null to only warn")
        return broken

    def record(self, spec: str, verdicts: Iterable[Verdict]) -> None:
        c = self.counts.setdefault(spec, SpecCount())
        new_bad_ref = False
        for v in verdicts:
            c.items += 1
            if v.reason.startswith(VERIFIER_FAILED):
                c.failed += 1
                c.first = c.first or v.reason[len(VERIFIER_FAILED):]
            elif v.reason.startswith(BAD_REFERENCE):
                new_bad_ref = new_bad_ref or c.bad_references == 0
                c.bad_references += 1
                c.first_bad_reference = c.first_bad_reference or v.reason
        if new_bad_ref:  # the data's fault, once per verifier: such a prompt scores 0 whatever is answered
            self._say(f"verifier {spec!r}: a sample has an unusable reference ({c.first_bad_reference[:160]}); "
                      "it scores 0 for every answer; mmrlvr score lists such rows")
        if not c.warned and too_many(c.failed, c.items, self.share):
            c.warned = True
            self._say(f"verifier {reward_label(spec)} failed on {c.failed} of {c.items} items "
                      f"({100 * c.failed / c.items:.0f}%; first: {c.first[:160]}); its failures score 0, "
                      f"as a wrong answer would: {remedy(c.first)}")

    def _say(self, msg: str) -> None:
        if self.warn is not None:
            self.warn(msg)
            return
        log.warning("mmrlvr: warning: %s", msg)

    def total_failed(self) -> int:
        return sum(c.failed for c in self.counts.values())

    def total_bad_references(self) -> int:
        return sum(c.bad_references for c in self.counts.values())


TIMEOUTS = ("timed out after", "did not answer in time")  # failure reasons a longer verifier_timeout may cure


def remedy(first: str) -> str:
    """What to do about a verifier's failures: a time-out may need more time; an error it raises
    (a KeyError, a TypeError) is its own, which no setting fixes."""
    if any(t in first for t in TIMEOUTS):
        return "make the verifier faster or raise verifier_timeout"
    if first.startswith("raised "):  # "raised KeyError: 'level'"
        return f"fix the {first[len('raised '):].split(':')[0]} the verifier raises (more time would not help)"
    return "fix the verifier"


def reward_label(spec: str) -> str:
    """A reward spec as the user knows it: a callable handed to `mmrlvr.run` by its name, not the
    staged `.mmrlvr_inputs/rewards-<hash>/rewards.py:name` it runs from."""
    from mmrlvr.data.staged import staged_folder

    path, _, name = spec.rpartition(":")
    if path and staged_folder(path) is not None:
        return f"{name!r} (a reward callable passed to mmrlvr.run)"
    return repr(spec)


def too_many(failed: int, items: int, share: float = FAIL_SHARE) -> bool:
    """More failures than a small share: `failed > max(1, share * items)` (one stray one is noise)."""
    return failed > max(1.0, share * items)


def failed_frac(verdicts: Sequence[Verdict]) -> float:
    """Share of `verdicts` where the verifier itself failed (`verifier failed: ...`), 0.0 for none.

    Logged each step as `verifier/failed_frac`: such a verdict scores 0 like a wrong answer, so a
    reward curve alone cannot tell a broken verifier from a policy that answers wrongly."""
    return sum(is_failure(v) for v in verdicts) / len(verdicts) if verdicts else 0.0
