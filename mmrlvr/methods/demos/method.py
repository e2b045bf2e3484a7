"""demos's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.demos.source import DemoSource, DemoStrategy
from mmrlvr.methods.demos import checks
from mmrlvr.methods.hooks import Method, register


def demos_source(cfg, train_set, base):
    dm = cfg.sample_efficiency.demos
    return DemoSource(base, DemoStrategy(train_set, cfg.seed, p0=dm.p0, k=dm.k,
                                         anneal_steps=dm.anneal_steps or cfg.train.steps))


METHOD = register(Method("demos", "explanation/sample-efficiency.md",
                         rules=checks.RULES,
                         on=lambda cfg: bool(cfg.sample_efficiency.demos.enabled), source=demos_source))
