"""The advantage estimator `dbb`, registered into the algos' table from here (the method's folder).

`mmrlvr.algos.advantages.ADVANTAGES` names `mmrlvr.methods` as its plug-in package, so this module
is imported before the table is first read: `algo.advantage: dbb` is found by validation and by
`estimate` alike, while the algos layer never imports a method.
"""

from __future__ import annotations

import torch

from mmrlvr.algos.advantages import ADVANTAGES, EstimatorContext, stateful
from mmrlvr.methods.dbb.posteriors import dbb_advantages


@ADVANTAGES.register("dbb")
@stateful
def dbb_estimator(rewards: torch.Tensor, context: EstimatorContext | None) -> torch.Tensor:
    """DBB: r minus each prompt's Beta posterior of its pass rate (`mmrlvr.methods.dbb.posteriors.dbb`),
    not the group's mean. Reads and updates the posteriors in `context.prompt_stats` (call once per
    batch) with `context.settings` (a `DbbOptions`); the posteriors learn the rewards without
    `context.bonus`, the advantage includes it."""
    if context is None or context.prompt_stats is None:
        raise ValueError("advantage estimator 'dbb' needs the run's per-prompt statistics "
                         "(EstimatorContext.prompt_stats): its baseline is each prompt's posterior from earlier steps")
    if context.settings is None:
        raise ValueError("advantage estimator 'dbb' needs its settings (EstimatorContext.settings: a "
                         "mmrlvr.methods.dbb.posteriors.DbbOptions, built from sample_efficiency.dbb)")
    bonus = context.bonus if context.bonus is not None else torch.zeros_like(rewards)
    return dbb_advantages(rewards - bonus, context, context.settings, bonus=bonus)
