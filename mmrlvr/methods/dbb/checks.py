"""DBB's checks of `sample_efficiency.dbb.*` and of what it needs of the rest of the config, one line
each, before anything heavy runs. DBB is on by either switch (`uses_dbb`); each line names the one
the config used; its warning where another estimator named beside it does not train; and what it
writes into the resolved config."""

from __future__ import annotations

import dataclasses
from typing import Iterable

from mmrlvr.checks.rules import Rule, _line, _num, at_least, one_of
from mmrlvr.checks.validate import preset_value
from mmrlvr.config.efficiency import dbb_switch, uses_dbb

RULES: tuple[Rule, ...] = (
    Rule("sample_efficiency.dbb.lam", lambda v: _num(v) and 0 < v <= 1, "a number in (0, 1]"),
    Rule("sample_efficiency.dbb.eps", at_least(0), "a finite number >= 0"),
    Rule("sample_efficiency.dbb.scale", one_of("std", "none"), "std or none"),
)


def check(cfg) -> Iterable[str]:
    """Rewards DBB cannot read as pass rates, and settings it cannot work with."""
    dbb = dbb_switch(cfg)
    if not dbb:
        return
    # the overlong penalty would push rewards out of [0, 1]; dynamic sampling would drop the
    # all-equal groups DBB exists to learn from
    if preset_value(cfg, "overlong_buffer"):
        yield _line("algo.overlong_buffer", preset_value(cfg, "overlong_buffer"),
                    f"expected 0 with {dbb} (a length penalty leaves rewards outside [0, 1])")
    if preset_value(cfg, "dynamic_sampling"):
        yield _line("algo.dynamic_sampling", True,
                    f"expected false with {dbb} (it drops the all-equal groups DBB learns from)")
    for i, term in enumerate(cfg.rewards):
        if _num(term.weight) and term.weight < 0:
            yield _line(f"rewards[{i}].weight", term.weight,
                        f"expected >= 0 with {dbb} (rewards / maximum must lie in [0, 1])")


def warn(cfg) -> str | None:
    """`sample_efficiency.dbb.enabled: true` makes the estimator dbb (as documented), so an
    algo.advantage the user named besides it is not the one that trains (a preset's is not named)."""
    named = cfg.algo.advantage
    if not cfg.sample_efficiency.dbb.enabled or named is None or named == "dbb":
        return None
    return (f"algo.advantage={named} with sample_efficiency.dbb.enabled=true: the advantages are DBB's (its "
            f"per-prompt baseline replaces {named}, as documented); set algo.advantage=dbb (the same as the "
            f"enabled switch) or sample_efficiency.dbb.enabled=false to train with {named}")


def resolve(cfg):
    """The two switches agree in the config a run reads: `sample_efficiency.dbb.enabled` makes
    algo.advantage dbb (it replaces the estimator, also one the user named), and `algo.advantage: dbb`
    sets enabled."""
    if not uses_dbb(cfg):
        return cfg
    se = cfg.sample_efficiency
    return dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, advantage="dbb"),
                               sample_efficiency=dataclasses.replace(se, dbb=dataclasses.replace(se.dbb, enabled=True)))
