"""Small adapters for tests that drive one step's pieces by hand (not the loop)."""

from __future__ import annotations

import dataclasses

from mmrlvr.train.learner import Learner
from mmrlvr.recipe.step import advantages_for


def with_algo(cfg, algo):
    """The resolved config `collect`, `advantages_for` and the learner read: cfg with `algo` in it."""
    return dataclasses.replace(cfg, algo=algo)


def run_update(model, ref_model, optimizer, accelerator, batch, cfg, algo, suppress, seed: int = 0,
               token_weights=None, pending=None) -> dict:
    """Advantages of the batch, then one `Learner.update` (no LR schedule)."""
    cfg = with_algo(cfg, algo)
    learner = Learner(cfg, model, optimizer, accelerator, suppress, ref_model=ref_model)
    adv = advantages_for(batch, cfg)
    return learner.update(batch, adv, token_weights, seed=seed, pending=pending)
