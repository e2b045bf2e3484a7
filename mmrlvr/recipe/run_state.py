"""The run state: what a resumed run needs besides weights, optimizer and RNG states.

One JSON-serialisable record (it is written into each checkpoint's state.json): the last
finished step, the held-out evaluation before RL, the warm start's summary, the prompt source's
state, the per-prompt statistics, and each active method's own state under the method's name
(only a non-empty one is written). `to_dict()` / `from_dict()` are the only (de)serialisers.
"""

from __future__ import annotations

import dataclasses

from mmrlvr.data.sources import PromptStats
from mmrlvr.methods.hooks import METHODS


@dataclasses.dataclass
class RunState:
    step: int = 0
    eval_before: dict | None = None
    warm_start: dict | None = None
    source: dict = dataclasses.field(default_factory=dict)  # the prompt source's state_dict()
    prompt_stats: PromptStats = dataclasses.field(default_factory=PromptStats)
    methods: dict[str, dict] = dataclasses.field(default_factory=dict)  # method name -> its state_dict()

    def to_dict(self) -> dict:
        return {"step": self.step, "eval_before": self.eval_before, "warm_start": self.warm_start,
                "source": dict(self.source), "prompt_stats": self.prompt_stats.state_dict(),
                **{name: state for name, state in self.methods.items() if state}}

    @classmethod
    def from_dict(cls, d: dict) -> "RunState":
        """From a checkpoint's state; a checkpoint written before prompt sources held `data_pos`."""
        source = d.get("source") or {"kind": "seeded_stream", "pos": int(d.get("data_pos", 0))}
        stats = PromptStats()
        stats.load_state_dict(d.get("prompt_stats") or {})
        methods = {k: dict(d[k]) for k in METHODS.names() if d.get(k)}  # each method's own entry
        return cls(int(d["step"]), d.get("eval_before"), d.get("warm_start"), source, stats, methods)
