"""temporal_contrast's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

import dataclasses

from mmrlvr.methods.temporal_contrast import checks
from mmrlvr.methods.hooks import Method, register
from mmrlvr.methods.round import CollectContext, Round
from mmrlvr.methods.temporal_contrast.bonus import temporal_contrast
from mmrlvr.train.distributed import rank_seed, rank_world


def temporal_contrast_bonus(rnd: Round, ctx: CollectContext) -> Round:
    """Video prompts answered again on shuffled frames (scored, never trained on) -> a reward bonus."""
    rank, world = rank_world()
    rewards, metrics = temporal_contrast(ctx.engine, rnd.prompts, rnd.rewards, rnd.verdicts, ctx.cfg, ctx.scorer,
                                         seed=rank_seed(ctx.seed * 1000 + 500 + rnd.index, rank, world))
    if rewards is rnd.rewards:
        return rnd
    added = (rewards - rnd.rewards).nan_to_num(0.0) + (rnd.bonus if rnd.bonus is not None else 0.0)
    return dataclasses.replace(rnd, rewards=rewards, bonus=added, metrics={**rnd.metrics, **metrics})


METHOD = register(Method("temporal_contrast", "explanation/temporal-contrast.md",
                         rules=checks.RULES, warn=checks.warn,
                         on=lambda cfg: bool(cfg.temporal_contrast.enabled), collect=temporal_contrast_bonus))
