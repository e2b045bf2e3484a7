"""The checks on the algorithm's named parts (preset, policy loss, advantage, KL, aggregation):
each reads the names its registry or module defines, so no name is listed twice. The registries import torch, so they are read inside the checks, never at import. Run by
`mmrlvr.checks.validate` (its `CHECKS` list)."""

from __future__ import annotations

from typing import Iterable

from mmrlvr.checks.rules import _line, _num, either
from mmrlvr.config.schema import Config


def policy_loss_names() -> tuple[str, ...]:
    """The `algo.importance_level` values: the registered policy losses, in registration order."""
    from mmrlvr.algos.losses import POLICY_LOSSES

    return tuple(POLICY_LOSSES.in_order())


def _check_policy_loss(cfg: Config) -> Iterable[str]:
    """algo.importance_level names a registered policy loss (the registry is the one list)."""
    value, known = cfg.algo.importance_level, policy_loss_names()
    if value is not None and value not in known:
        yield _line("algo.importance_level", value, f"expected {either(known)}")


def _check_algo(cfg: Config) -> Iterable[str]:
    """Preset name, then the fields the preset fills (so a bad preset value is named too)."""
    from mmrlvr.algos.advantages import ADVANTAGES
    from mmrlvr.algos.losses import AGGREGATIONS, KL_KINDS, ROLLOUT_CORRECTIONS
    from mmrlvr.algos.presets import PRESETS

    if cfg.algo.algorithm not in PRESETS:
        yield _line("algo.algorithm", cfg.algo.algorithm, f"one of {', '.join(sorted(PRESETS))}")
        return
    named = [("advantage", ADVANTAGES.names()), ("kl_kind", KL_KINDS), ("aggregation", AGGREGATIONS),
             ("rollout_correction", ROLLOUT_CORRECTIONS)]
    for field, known in named:
        value = getattr(cfg.algo, field)
        if value is not None and value not in known:
            yield _line(f"algo.{field}", value, f"one of {', '.join(known)}")
