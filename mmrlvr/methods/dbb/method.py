"""dbb's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

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
