"""Temporal contrast (`temporal_contrast.enabled`, T-GRPO): video prompts answered again on their
frames shuffled; a group right more often on ordered frames gets a reward bonus.

Fills `collect`: after a round is scored, the shuffled re-answers (scored, never trained on,
bonus.py) decide the bonus added to the round's rewards; the maths (T-GRPO's and TGPO's bonus,
pure functions of the scores) is maths.py. Docs: explanation/temporal-contrast.md.
"""

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
