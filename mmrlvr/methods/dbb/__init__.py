"""DBB, the Bayesian baseline (`sample_efficiency.dbb` or `algo.advantage: dbb`): each prompt's
pass rate as a Beta posterior carried across steps, the advantage's baseline read from it.

The folder holds the whole method: its maths (`posteriors.py`: the Beta-Bernoulli baseline and
the per-prompt posteriors, pure tensors), the estimator `dbb` it registers into the algos' table
(`estimator.py`), its settings' checks, warning and resolution (`checks.py`), and this record,
which fills `check`, `warn`, `resolve`, `estimator` (its settings record from the config)
and `sync` (each rank updated its own prompts' posteriors: share them, so every rank reads the
same). Docs: explanation/sample-efficiency.md.
"""

from __future__ import annotations

from mmrlvr.methods.dbb import checks, estimator  # noqa: F401 - estimator registers the advantage estimator dbb
from mmrlvr.methods.dbb.posteriors import DbbOptions
from mmrlvr.methods.hooks import Method, register
from mmrlvr.train.distributed import gather_lists


def dbb_options(cfg):
    """`sample_efficiency.dbb`'s settings and the verifiers' largest reward, as the estimator dbb reads them."""
    from mmrlvr.config.efficiency import max_reward

    if cfg.sample_efficiency.dbb.enabled and cfg.algo.advantage != "dbb":  # not silently another estimator
        raise ValueError(f"sample_efficiency.dbb.enabled with algo.advantage={cfg.algo.advantage!r}: the config is "
                         "not resolved (mmrlvr.checks.resolve.resolve_config makes algo.advantage dbb)")
    d = cfg.sample_efficiency.dbb
    return DbbOptions(lam=d.lam, eps=d.eps, scale=d.scale, include_current=d.include_current, max_reward=max_reward(cfg))


def share_posteriors(stats, sample_ids: list[str]) -> None:
    """Every rank's posteriors of the prompts it trained on, on every rank (all ranks call this)."""
    for sid, ab in gather_lists([(sid, stats.extra(sid)["dbb"]) for sid in sample_ids]):
        stats.extra(sid)["dbb"] = list(ab)


def _on(cfg) -> bool:
    from mmrlvr.config.efficiency import uses_dbb

    return uses_dbb(cfg)


METHOD = register(Method("dbb", "explanation/sample-efficiency.md",
                         rules=checks.RULES, check=checks.check, warn=checks.warn, resolve=checks.resolve,
                         on=_on, estimator=dbb_options, sync=share_posteriors,
                         experimental=True))
