"""Resolving a config: the algorithm's preset filled into `algo`, so the run reads no None.

The presets are plain tables (`mmrlvr.algos.presets`); filling them in takes a whole config,
so it happens here, above the maths, once per run (`mmrlvr.recipe.loop.train`), and the
resolved config is what the run saves and reruns.
"""

from __future__ import annotations

import dataclasses

from mmrlvr.algos.losses import KL_KINDS, LOSS_KL_KINDS, ROLLOUT_CORRECTIONS
from mmrlvr.algos.presets import _BASE, PRESETS
from mmrlvr.config import AlgoConfig


def resolve_algo(cfg: AlgoConfig, max_new_tokens: int, engine: str = "hf") -> AlgoConfig:
    """Fill unset fields from the preset; fields the user set always win. The rollout correction
    defaults by `engine`: token_tis for vllm and vllm_server (their kernels are not the learner's, and
    with rollout.async_steps=1 the sampler's weights lag one update), none for hf."""
    if cfg.algorithm not in PRESETS:
        raise KeyError(f"unknown algorithm {cfg.algorithm!r}; known: {', '.join(sorted(PRESETS))}")
    defaults = {**_BASE, **PRESETS[cfg.algorithm]}
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    for key, value in defaults.items():
        if values[key] is None:
            values[key] = value
    if values["overlong_buffer"] == -1:  # DAPO's buffer is a fifth of the length budget
        values["overlong_buffer"] = max(1, max_new_tokens // 5)
    if values["norm_length"] is None and values["aggregation"] == "seq-mean-token-sum-norm":
        values["norm_length"] = max_new_tokens
    if values["rollout_correction"] is None:
        values["rollout_correction"] = "token_tis" if engine in ("vllm", "vllm_server") else "none"
    _check_kl(values["kl_kind"], values["kl_coef"])
    _check_correction(values["rollout_correction"], values["rollout_correction_cap"])
    return AlgoConfig(**values)


def _check_correction(mode: str, cap) -> None:
    if mode not in ROLLOUT_CORRECTIONS:
        raise ValueError(f"algo.rollout_correction {mode!r} unknown; known: {', '.join(ROLLOUT_CORRECTIONS)}")
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or not cap > 0 or cap != cap or cap == float("inf"):
        raise ValueError(f"algo.rollout_correction_cap={cap!r}: expected a finite number > 0")


def _check_kl(kind: str, coef: float) -> None:
    if kind not in KL_KINDS:
        raise ValueError(f"algo.kl_kind {kind!r} unknown; known: {', '.join(KL_KINDS)}")
    if coef > 0 and kind not in LOSS_KL_KINDS:
        raise ValueError(
            f"algo.kl_kind={kind!r} with algo.kl_coef={coef}: the k1 estimator has zero expected gradient "
            "as a loss term, so it would regularise nothing; use k3 (gradient of KL(ref || policy), "
            "GRPO's choice) or k2 (gradient of KL(policy || ref))"
        )


def resolve_config(cfg):
    """The one config a run reads: the preset filled into `algo` (rollout correction defaulted by
    the engine) and eval.max_new_tokens written out, so the saved file reruns this run; then each
    method's `resolve` in registration order (DBB's two switches made to agree, for one), on or off:
    a method's resolve reads the config to see whether it is on."""
    from mmrlvr.checks.rules import METHOD_SETTINGS

    algo = resolve_algo(cfg.algo, cfg.rollout.max_new_tokens, cfg.rollout.engine)
    eval_tokens = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    cfg = dataclasses.replace(cfg, algo=algo, eval=dataclasses.replace(cfg.eval, max_new_tokens=eval_tokens))
    for name in METHOD_SETTINGS.in_order():
        resolve = METHOD_SETTINGS.get(name).resolve
        cfg = cfg if resolve is None else resolve(cfg)
    return cfg
