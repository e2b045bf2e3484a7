"""Group-relative advantage estimators.

Each takes rewards `(B, G)` (B prompts, G completions of each, groups rectangular) and returns
advantages `(B, G)`. NaN marks an unscorable completion: it is left out of every statistic and
gets advantage 0, so one broken completion cannot shift its group's baseline. A group whose
scorable rewards are all equal gets exactly 0 from every group-baseline estimator: a float32 mean
of 0.2, 0.3 or 1.2 is not exact, and `(r - mean) / (std + eps)` would turn that rounding into a
large advantage.

A stateful estimator (`stateful`) is called as fn(rewards, context) with an `EstimatorContext`:
`dbb`, whose baseline is each prompt's Beta posterior of its pass rate (kept in the run's
per-prompt statistics), is one; it gives an all-equal group non-zero advantages on purpose. It is
registered from its method's folder (`mmrlvr/methods/dbb/estimator.py`): `ADVANTAGES` names
`mmrlvr.methods.builtin` as its plug-in package, so a reader that never imported the methods still finds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mmrlvr.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator", plugins="mmrlvr.methods.builtin")  # dbb registers from there


def _valid(rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    valid = ~torch.isnan(rewards)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))
    return valid, r, valid.sum(dim=1, keepdim=True)


def group_mean(rewards: torch.Tensor) -> torch.Tensor:
    """(B, G) -> (B, 1) mean over each group's scorable rewards (0 for an empty group)."""
    valid, r, n = _valid(rewards)
    return r.sum(dim=1, keepdim=True) / n.clamp(min=1)


def group_std(rewards: torch.Tensor) -> torch.Tensor:
    """(B, G) -> (B, 1) unbiased std over scorable rewards (0 where fewer than 2)."""
    valid, r, n = _valid(rewards)
    mean = group_mean(rewards)
    sq = torch.where(valid, (r - mean) ** 2, torch.zeros_like(r)).sum(dim=1, keepdim=True)
    return torch.where(n > 1, (sq / (n - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))


def flat_groups(rewards: torch.Tensor) -> torch.Tensor:
    """(B, G) -> (B, 1) bool: the group's scorable rewards are all exactly equal (or < 2 of them)."""
    valid = ~torch.isnan(rewards)
    hi = torch.where(valid, rewards, torch.full_like(rewards, -float("inf"))).amax(dim=1, keepdim=True)
    lo = torch.where(valid, rewards, torch.full_like(rewards, float("inf"))).amin(dim=1, keepdim=True)
    return (valid.sum(dim=1, keepdim=True) < 2) | (hi == lo)


def _zero_invalid(adv: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """0 for unscorable completions and for every member of an all-equal group."""
    return torch.where(torch.isnan(rewards) | flat_groups(rewards), torch.zeros_like(adv), adv)


@ADVANTAGES.register("grpo")
def grpo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(r - group mean) / (group std + eps); all-equal groups give zeros (GRPO)."""
    adv = (rewards - group_mean(rewards)) / (group_std(rewards) + eps)
    return _zero_invalid(adv, rewards)


@ADVANTAGES.register("dr_grpo")
def dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    """r - group mean: no std division, which biases towards easy/hard groups (Dr. GRPO)."""
    return _zero_invalid(rewards - group_mean(rewards), rewards)


@ADVANTAGES.register("rloo")
def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """r minus the mean of the other scorable rewards of its group (leave-one-out baseline)."""
    valid, r, n = _valid(rewards)
    others = (r.sum(dim=1, keepdim=True) - r) / (n - 1).clamp(min=1)
    adv = torch.where(n > 1, r - others, torch.zeros_like(r))
    return _zero_invalid(adv, rewards)


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """r - group mean, then whitened by the mean and std over the whole batch (REINFORCE++)."""
    centred = dr_grpo(rewards)
    valid = ~torch.isnan(rewards)
    vals = centred[valid]
    if vals.numel() < 2:
        return torch.zeros_like(centred)
    adv = (centred - vals.mean()) / (vals.std() + eps)
    return _zero_invalid(adv, rewards)


def pad_groups(groups: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """Groups of unequal size, each (G_b,) -> ((B, G_max) rewards NaN-padded, [G_b]).

    Every estimator leaves NaN out of its statistics, so padding changes nothing for the real
    members: rectangular groups give the numbers they always gave."""
    sizes = [int(g.numel()) for g in groups]
    out = torch.full((len(groups), max(sizes, default=0)), float("nan"))
    for b, g in enumerate(groups):
        out[b, : sizes[b]] = g
    return out, sizes


def flatten_groups(values: torch.Tensor, sizes: list[int] | None = None) -> torch.Tensor:
    """(B, G_max) per-completion values -> (N,) for the batch's rows (each group's first G_b)."""
    if sizes is None or all(s == values.shape[1] for s in sizes):
        return values.reshape(-1)
    keep = torch.arange(values.shape[1]).unsqueeze(0) < torch.tensor(sizes).unsqueeze(1)
    return values[keep]


@dataclass
class EstimatorContext:
    """What a stateful estimator may read besides the rewards: the prompts' ids (one per row of
    the rewards), the step, the per-prompt statistics of the run (`mmrlvr.data.sources.PromptStats`,
    before this step's rewards are added), `bonus` (B, G) the part of the rewards a collect
    strategy added (temporal contrast; None: nothing), and `settings`, the chosen estimator's own
    settings record (`DbbOptions` for dbb; None for an estimator that has none)."""

    sample_ids: list[str]
    step: int
    prompt_stats: Any = None
    bonus: torch.Tensor | None = None
    settings: Any = None


def stateful(fn):
    """Mark an estimator as reading an `EstimatorContext`: it is called as fn(rewards, context)."""
    fn.uses_context = True
    return fn


def estimate(name: str, rewards: torch.Tensor, context: EstimatorContext | None = None) -> torch.Tensor:
    """(B, G) rewards -> (B, G) advantages by the registered estimator `name`; a stateful one
    (see `stateful`) also gets the context."""
    fn = ADVANTAGES.get(name)
    return fn(rewards, context) if getattr(fn, "uses_context", False) else fn(rewards)
