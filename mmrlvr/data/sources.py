"""Where an RL step's prompts come from, and what the run remembers about each prompt.

A prompt source is anything with the four methods of `PromptSource`; the loop calls `take`
before sampling and `feedback` after scoring, and saves `state_dict()` in every checkpoint
(JSON-serialisable: plain dicts, lists, numbers, strings). The base source is `SeededStream`
(an endless seeded shuffle); a method may replace or wrap it (prompt replay,
`mmrlvr.methods.replay`, keeps its queue in the same state dict).

`PromptStats` holds per-prompt statistics (visits, last step, reward sums) that estimators read
through `mmrlvr.algos.advantages.EstimatorContext`; a method keeps its own fields per prompt
under `extra`.
"""

from __future__ import annotations

import math
import random
from typing import Protocol, Sequence

from mmrlvr.types import Sample


class PromptSource(Protocol):
    def take(self, n: int, step: int) -> list[Sample]:
        """The next n prompts for RL step `step` (possibly repeats of earlier ones)."""

    def feedback(self, step: int, sample_ids: list[str], rewards) -> None:
        """What step `step` scored: rewards (n, G) aligned with sample_ids, NaN where unscorable
        (and as padding of shorter groups)."""

    def state_dict(self) -> dict:
        """Everything needed to continue exactly, JSON-serialisable."""

    def load_state_dict(self, d: dict) -> None:
        """Restore what `state_dict` returned."""


class SeededStream:
    """Endless, seeded pass over the prompts: a fresh shuffle per pass (epoch); `pos` counts
    the prompts handed out. Stateless apart from `pos`, so it ignores feedback and can be
    copied to look ahead (`prefetchable`)."""

    prefetchable = True

    def __init__(self, samples: Sequence[Sample], seed: int, pos: int = 0):
        self.samples, self.seed, self.pos = samples, seed, pos
        self._epoch, self._order = -1, []

    def take(self, n: int, step: int = 0) -> list[Sample]:
        out = []
        for _ in range(n):
            epoch, i = divmod(self.pos, len(self.samples))
            if epoch != self._epoch:  # a fresh seeded shuffle per pass over the data
                self._epoch, self._order = epoch, list(range(len(self.samples)))
                random.Random(f"data-{self.seed}-{epoch}").shuffle(self._order)
            out.append(self.samples[self._order[i]])
            self.pos += 1
        return out

    def feedback(self, step: int, sample_ids: list[str], rewards) -> None:
        pass

    def state_dict(self) -> dict:
        return {"kind": "seeded_stream", "pos": self.pos}

    def load_state_dict(self, d: dict) -> None:
        self.pos = int(d["pos"])


def _row(rewards, i: int) -> list[float]:
    row = rewards[i]
    return [float(x) for x in (row.tolist() if hasattr(row, "tolist") else row)]


class PromptStats:
    """Per-prompt statistics over the run, keyed by sample id.

    Each entry: visits (times the prompt was sampled), last_step, n (scored completions),
    reward_sum, reward_sq_sum, and `extra` (a dict a method may fill with its own JSON values).
    NaN rewards (unscorable, or padding of shorter groups) are not counted in n or the sums.
    """

    def __init__(self):
        self.entries: dict[str, dict] = {}

    def get(self, sample_id: str) -> dict | None:
        return self.entries.get(sample_id)

    def _entry(self, sid: str) -> dict:
        return self.entries.setdefault(sid, {"visits": 0, "last_step": 0, "n": 0, "reward_sum": 0.0,
                                             "reward_sq_sum": 0.0, "extra": {}})

    def extra(self, sample_id: str) -> dict:
        """The prompt's `extra` dict for a method's own values (the entry is made if new)."""
        return self._entry(sample_id)["extra"]

    def update(self, step: int, sample_ids: list[str], rewards) -> None:
        """Add one step's rewards (n, G) for the n prompts `sample_ids`."""
        for i, sid in enumerate(sample_ids):
            e = self._entry(sid)
            scored = [x for x in _row(rewards, i) if not math.isnan(x)]
            e["visits"] += 1
            e["last_step"] = int(step)
            e["n"] += len(scored)
            e["reward_sum"] += sum(scored)
            e["reward_sq_sum"] += sum(x * x for x in scored)

    def mean(self, sample_id: str) -> float | None:
        e = self.entries.get(sample_id)
        return e["reward_sum"] / e["n"] if e and e["n"] else None

    def state_dict(self) -> dict:
        return {k: {**v, "extra": dict(v["extra"])} for k, v in self.entries.items()}

    def load_state_dict(self, d: dict) -> None:
        self.entries = {k: {**v, "extra": dict(v.get("extra", {}))} for k, v in d.items()}
