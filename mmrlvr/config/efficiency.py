"""The sample-efficiency section: prompt replay, DBB advantages, demonstrations, arrol, and the
readers of the config several of them share (`max_reward`, `uses_dbb`, `dbb_switch`, `dbb_named`).

`Config.sample_efficiency` holds the container; each method's own dataclass is its folder's
`settings.py` (`mmrlvr/methods/<name>/settings.py`), named here by its key and read from
`mmrlvr.config.sections.SECTIONS`. Each method is off by default and its settings are checked up
front by its folder's checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmrlvr.config.sections import section_field


@dataclass
class SampleEfficiencyConfig:
    replay: Any = section_field("sample_efficiency.replay")
    """Prompt replay."""
    dbb: Any = section_field("sample_efficiency.dbb")
    """Beta-Bernoulli (DBB) advantages: the settings of the estimator algo.advantage=dbb."""
    demos: Any = section_field("sample_efficiency.demos")
    """Demonstration bootstrapping."""
    arrol: Any = section_field("sample_efficiency.arrol")
    """Online rollout pruning with a learned quality head."""


def max_reward(cfg) -> float:
    """The largest reward the verifiers can give a completion: the positive reward weights (1 with
    none). Replay's pass rate and DBB's posteriors divide the verifiers' rewards by it; a temporal-
    contrast bonus is not part of them (a prompt right 80% of the time reads 0.8, not 0.8 / 1.3)."""
    return sum(max(0.0, t.weight) for t in cfg.rewards) if cfg.rewards else 1.0


def uses_dbb(cfg) -> bool:
    """DBB computes the advantages: `sample_efficiency.dbb.enabled` or `algo.advantage: dbb` (one
    answer for the user's config and the resolved one, where both say so; no preset names dbb)."""
    return bool(cfg.sample_efficiency.dbb.enabled) or cfg.algo.advantage == "dbb"


def dbb_switch(cfg) -> str | None:
    """How the config turns DBB on, for its error lines: "sample_efficiency.dbb" (the enabled
    switch, named first), "algo.advantage=dbb", or None when DBB is off."""
    if not uses_dbb(cfg):
        return None
    return "sample_efficiency.dbb" if cfg.sample_efficiency.dbb.enabled else "algo.advantage=dbb"


def dbb_named(saved: dict) -> dict:
    """A config saved before algo.advantage could name dbb: with `sample_efficiency.dbb.enabled: true`
    it trained with dbb whatever its algo.advantage said, which the resolved config now writes out."""
    algo, se = saved.get("algo"), saved.get("sample_efficiency")
    dbb = se.get("dbb") if isinstance(se, dict) else None
    if isinstance(algo, dict) and isinstance(dbb, dict) and dbb.get("enabled") is True:
        return {**saved, "algo": {**algo, "advantage": "dbb"}}
    return saved
