"""Demonstration bootstrapping's checks of `sample_efficiency.demos.*`, one line each, before anything heavy runs."""

from __future__ import annotations

from mmrlvr.checks.rules import Rule, _num, at_least

RULES: tuple[Rule, ...] = (
    Rule("sample_efficiency.demos.p0", lambda v: _num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    Rule("sample_efficiency.demos.anneal_steps", at_least(1), "an integer >= 1 (or null: train.steps)"),
    Rule("sample_efficiency.demos.k", at_least(1), "an integer >= 1"),
)
