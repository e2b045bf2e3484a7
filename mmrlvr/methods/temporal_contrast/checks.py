"""Temporal contrast's checks of `temporal_contrast.*`, one line each, before anything heavy runs."""

from __future__ import annotations

from mmrlvr.checks.rules import Rule, _num, at_least, one_of

RULES: tuple[Rule, ...] = (
    Rule("temporal_contrast.method", one_of("tgrpo", "tgpo"), "tgrpo or tgpo"),
    Rule("temporal_contrast.alpha", at_least(0), "a finite number >= 0"),
    Rule("temporal_contrast.mu", at_least(0), "a finite number >= 0"),
    Rule("temporal_contrast.shuffled_samples", at_least(1), "an integer >= 1 (or null: group_size // 2)"),
    Rule("temporal_contrast.correct_threshold", lambda v: _num(v) and 0 <= v < 1,
         "a number in [0, 1) (an answer score above it counts as correct)"),
)
