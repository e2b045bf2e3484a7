"""Demonstration bootstrapping (`sample_efficiency.demos`, CBRL): solved examples shown as earlier
chat turns, with a probability that falls to 0 over training.

Fills `source`: the prompt source is wrapped by `DemoSource` (source.py), which adds the
demonstrations right after `take` (never for evaluation, which reads the eval split). Docs:
explanation/sample-efficiency.md.
"""

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
