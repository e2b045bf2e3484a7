"""replay's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.replay import checks
from mmrlvr.methods.hooks import Method, register
from mmrlvr.methods.replay.prompts import PromptReplay


def replay_source(cfg, train_set, base):
    """The replaying source in place of the seeded stream (the same fresh order either way)."""
    from mmrlvr.config.efficiency import max_reward

    rp = cfg.sample_efficiency.replay
    return PromptReplay(train_set, cfg.seed, fraction=rp.fraction, cooldown=rp.cooldown, max_reuse=rp.max_reuse,
                        min_pass_rate=rp.min_pass_rate, max_pass_rate=rp.max_pass_rate, max_reward=max_reward(cfg))


METHOD = register(Method("replay", "explanation/sample-efficiency.md",
                         rules=checks.RULES, check=checks.check,
                         on=lambda cfg: bool(cfg.sample_efficiency.replay.enabled), source=replay_source))
