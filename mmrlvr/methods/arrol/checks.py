"""arrol's checks of `sample_efficiency.arrol` (online rollout pruning), one line each, before anything heavy runs.

Its values are checked even while it is off (a typo is named before someone turns it on); what it
needs of the rest of the config (the HF engine's segmented generation, one completion per episode,
synchronous rollouts, a prefix shorter than the completion budget) only when it is on.
"""

from __future__ import annotations

from typing import Iterable

from mmrlvr.checks.rules import Rule, _line, _num, above, at_least, one_of
from mmrlvr.methods.arrol.pruning import rows_per_prompt

EVAL_WEIGHTINGS = ("none", "head")


def _int_at_least(lo: int):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _share(v) -> bool:
    return _num(v) and 0 <= v <= 1


ARROL_RULES: list[Rule] = [
    Rule("over_generation", at_least(1), "a number >= 1 (rows generated per prompt / rollout.group_size)"),
    Rule("prefix_tokens", _int_at_least(1), "an integer >= 1 (tokens before the keep-or-drop decision)"),
    Rule("target_pos_share", _share, "a number in [0, 1]"),
    Rule("positive_at", lambda v: _num(v) and 0 < v <= 1, "a number in (0, 1] (share of the largest reward)"),
    Rule("head_lr", above(0), "a finite number > 0"),
    Rule("head_weight_decay", at_least(0), "a finite number >= 0"),
    Rule("head_steps", _int_at_least(1), "an integer >= 1"),
    Rule("min_auroc", _share, "a number in [0, 1] (0.5 is chance)"),
    Rule("auroc_window", _int_at_least(1), "an integer >= 1"),
    Rule("min_labels", _int_at_least(1), "an integer >= 1"),
    Rule("eval_weighting", one_of(*EVAL_WEIGHTINGS), "none or head"),
]


def check_arrol(cfg) -> Iterable[str]:
    a = cfg.sample_efficiency.arrol
    for rule in ARROL_RULES:
        value = getattr(a, rule.key)
        if not rule.ok(value):  # None is no setting here: every field has a value
            yield _line(f"sample_efficiency.arrol.{rule.key}", value, f"expected {rule.allowed}")
    if a.enabled is not True and a.enabled is not False:
        yield _line("sample_efficiency.arrol.enabled", a.enabled, "expected true or false")
    if a.enabled is not True:
        return
    r = cfg.rollout
    if r.engine != "hf":
        yield _line("rollout.engine", r.engine, "expected hf with sample_efficiency.arrol (segmented generation "
                    "is built for the HF engine only)")
    if r.episode != "single":
        yield _line("rollout.episode", r.episode, "expected single with sample_efficiency.arrol")
    if r.async_steps:
        yield _line("rollout.async_steps", r.async_steps, "expected 0 with sample_efficiency.arrol (the head "
                    "learns each round before the next is pruned)")
    if _int_at_least(1)(a.prefix_tokens) and _num(r.max_new_tokens) and a.prefix_tokens >= r.max_new_tokens:
        yield _line("sample_efficiency.arrol.prefix_tokens", a.prefix_tokens,
                    f"expected < rollout.max_new_tokens ({r.max_new_tokens}): a pruned row must save something")
    if _num(a.over_generation) and a.over_generation >= 1 and _num(r.group_size) and _num(r.generate_max_rows):
        m = rows_per_prompt(int(r.group_size), a.over_generation)
        if 1 <= r.generate_max_rows < m:
            yield _line("rollout.generate_max_rows", r.generate_max_rows,
                        f"at least the {m} rows arrol generates per prompt (a call generates whole groups)")
