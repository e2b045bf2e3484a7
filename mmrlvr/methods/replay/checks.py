"""Prompt replay's checks of `sample_efficiency.replay.*`, one line each, before anything heavy runs."""

from __future__ import annotations

import math
from typing import Iterable

from mmrlvr.checks.rules import Rule, _line, _num, at_least

RULES: tuple[Rule, ...] = (
    *[Rule(f"sample_efficiency.replay.{k}", lambda v: _num(v) and 0 <= v <= 1, "a number in [0, 1]")
      for k in ("fraction", "min_pass_rate", "max_pass_rate")],
    Rule("sample_efficiency.replay.cooldown", at_least(0), "an integer >= 0 (steps)"),
    Rule("sample_efficiency.replay.max_reuse", at_least(1), "an integer >= 1"),
)


def check(cfg) -> Iterable[str]:
    """What one value alone cannot say: the pass-rate window, and a batch that holds no replay."""
    rp, p = cfg.sample_efficiency.replay, cfg.rollout.prompts_per_step
    if rp.enabled and all(_num(v) for v in (rp.min_pass_rate, rp.max_pass_rate)) and rp.min_pass_rate > rp.max_pass_rate:
        yield _line("sample_efficiency.replay.min_pass_rate", rp.min_pass_rate,
                    f"expected <= sample_efficiency.replay.max_pass_rate ({rp.max_pass_rate})")
    if rp.enabled and _num(rp.fraction) and _num(p) and min(math.floor(p * min(rp.fraction, 0.5)), p // 2) < 1:
        yield _line("sample_efficiency.replay.fraction", rp.fraction,
                    f"expected a share that leaves at least one replay in a batch of rollout.prompts_per_step={p} "
                    "(min(floor(P * fraction), P // 2) >= 1)")
