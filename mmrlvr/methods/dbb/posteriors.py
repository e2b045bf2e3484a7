"""The Beta-Bernoulli baseline (DBB): its math (`dbb`) and the per-prompt Beta posteriors it
keeps across steps, saved in checkpoints.

`BetaPosteriors.advantages(sample_ids, rewards)` reads each prompt's (alpha, beta) (the prior
(1, 1) on a first visit), applies `dbb` and writes the updated posteriors back, so the learner
needs one call per rollout batch and `state_dict()` in its run state. The advantage estimator
`dbb` (`estimator.py` beside this, registered into `mmrlvr.algos.advantages.ADVANTAGES`) calls
`dbb_advantages`; this module is pure maths and imports nothing of the estimators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


def dbb(rewards: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, lam: float = 0.9, eps: float = 1e-6,
        scale: str = "std", include_current: bool = True,
        bonus: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Beta-Bernoulli baseline: a per-prompt Beta(alpha, beta) posterior of the pass rate.

    Our formula after DBB (arXiv 2603.18444), whose constants are not public. rewards (B, G) in
    [0, 1] (NaN: unscorable, left out, advantage 0); alpha, beta (B,) the prompts' posteriors
    (the prior is (1, 1)). With n scorable rewards summing to s:
        alpha' = lam * alpha + s,  beta' = lam * beta + (n - s),  p = alpha' / (alpha' + beta')
    (p from the old alpha, beta when include_current is False), and
        advantage_i = (r_i - p) / (sqrt(p (1 - p)) + eps)    (scale "std")
        advantage_i = r_i - p                                (scale "none", Dr.GRPO-style).
    Unlike GRPO, an all-equal group does NOT get zeros: a failed group on a prompt believed
    solvable is pushed down, a solved one on a hard prompt pushed up. A group with no scorable
    reward still decays its posterior by lam. `bonus` (B, G), scaled like the rewards (a temporal-
    contrast bonus), is added to r_i in the advantage only: the posterior is the verifier's pass
    rate. Returns (advantages (B, G), alpha' (B,), beta' (B,)).
    """
    if rewards.dim() != 2:
        raise ValueError(f"dbb: rewards must be (B, G), got shape {tuple(rewards.shape)}")
    b = rewards.shape[0]
    if tuple(alpha.shape) != (b,) or tuple(beta.shape) != (b,):
        raise ValueError(f"dbb: alpha and beta must be ({b},), got {tuple(alpha.shape)} and {tuple(beta.shape)}")
    if not 0 < lam <= 1:
        raise ValueError(f"dbb: lam={lam!r}: expected a number in (0, 1]")
    if not eps >= 0:
        raise ValueError(f"dbb: eps={eps!r}: expected a number >= 0")
    if scale not in ("std", "none"):
        raise ValueError(f"dbb: scale={scale!r}: expected std or none")
    if not (torch.isfinite(alpha).all() and torch.isfinite(beta).all() and (alpha > 0).all() and (beta > 0).all()):
        raise ValueError("dbb: alpha and beta must be finite and > 0 (the prior is 1, 1)")
    valid = ~torch.isnan(rewards)
    r = torch.where(valid, rewards, torch.zeros_like(rewards))
    n = valid.sum(dim=1, keepdim=True)
    if ((r < 0) | (r > 1)).any():
        raise ValueError("dbb: rewards must lie in [0, 1] (scale them by the maximum reward)")
    s = r.sum(dim=1)
    alpha_new = lam * alpha + s
    beta_new = lam * beta + (n.squeeze(1).to(r.dtype) - s)
    a, c = (alpha_new, beta_new) if include_current else (alpha, beta)
    p = (a / (a + c)).unsqueeze(1)
    adv = rewards - p if bonus is None else rewards + bonus - p
    if scale == "std":
        adv = adv / ((p * (1 - p)).sqrt() + eps)
    return torch.where(valid, adv, torch.zeros_like(adv)), alpha_new, beta_new


class BetaPosteriors:
    """(alpha, beta) per prompt id; JSON state. Rewards must already be divided by the maximum."""

    PRIOR = (1.0, 1.0)

    def __init__(self, lam: float = 0.9, eps: float = 1e-6, scale: str = "std", include_current: bool = True):
        self.lam, self.eps, self.scale, self.include_current = lam, eps, scale, include_current
        self.ab: dict[str, tuple[float, float]] = {}

    def advantages(self, sample_ids: Sequence[str], rewards: torch.Tensor,
                   bonus: torch.Tensor | None = None) -> torch.Tensor:
        """rewards (B, G) for prompts `sample_ids` -> advantages (B, G); posteriors updated from
        `rewards` alone, `bonus` (B, G) added to the advantages' rewards (see `dbb`).

        A prompt twice in one batch is two visits in row order (the second sees the first).
        """
        if rewards.dim() != 2 or rewards.shape[0] != len(sample_ids):
            raise ValueError(f"BetaPosteriors: rewards of shape {tuple(rewards.shape)} for {len(sample_ids)} prompts")
        adv = torch.zeros_like(rewards)
        seen: dict[str, int] = {}
        rank = []
        for sid in sample_ids:
            rank.append(seen.get(sid, 0))
            seen[sid] = rank[-1] + 1
        for r in range(max(rank, default=-1) + 1):
            rows = [i for i, k in enumerate(rank) if k == r]
            ids = [sample_ids[i] for i in rows]
            prior = torch.tensor([self.ab.get(s, self.PRIOR) for s in ids], dtype=torch.float64)
            a, alpha, beta = dbb(rewards[rows].double(), prior[:, 0], prior[:, 1], lam=self.lam, eps=self.eps,
                                 scale=self.scale, include_current=self.include_current,
                                 bonus=None if bonus is None else bonus[rows].double())
            adv[rows] = a.to(adv.dtype)
            for s, x, y in zip(ids, alpha.tolist(), beta.tolist()):
                self.ab[s] = (x, y)
        return adv

    def metrics(self) -> dict[str, float]:
        """dbb/prompts: prompts with a posterior; dbb/mean_p: their mean posterior pass rate."""
        ps = [a / (a + b) for a, b in self.ab.values()]
        return {"dbb/prompts": float(len(ps)), "dbb/mean_p": sum(ps) / len(ps) if ps else 0.0}

    def state_dict(self) -> dict:
        return {"ab": {k: [a, b] for k, (a, b) in sorted(self.ab.items())}}

    def load_state_dict(self, d: dict) -> None:
        self.ab = {k: (float(a), float(b)) for k, (a, b) in d["ab"].items()}


@dataclass(frozen=True)
class DbbOptions:
    """What `dbb_advantages` reads instead of the whole config: `sample_efficiency.dbb`'s settings
    and `max_reward`, the largest reward the verifiers give (`mmrlvr.config.efficiency.max_reward`)."""

    lam: float = 0.9
    eps: float = 1e-6
    scale: str = "std"
    include_current: bool = True
    max_reward: float = 1.0


def dbb_advantages(rewards: torch.Tensor, context, options: DbbOptions,
                   bonus: torch.Tensor | None = None) -> torch.Tensor:
    """The training step's `dbb` advantages: rewards (B, G) -> (B, G), called once per batch.

    `rewards` are the verifiers' (what the posteriors learn), `bonus` what a collect strategy
    added (temporal contrast: it moves the advantage, not the pass rate). Both are divided by
    `options.max_reward`, the rewards into [0, 1]; each prompt's (alpha, beta) lives in the
    run's per-prompt statistics (`context.prompt_stats`, entry `extra["dbb"]`, so it is saved in
    the run state and restored exactly on resume) and is updated here in place.
    """
    d = options
    if context is None or context.prompt_stats is None:
        raise ValueError("dbb advantages need the run's per-prompt statistics (EstimatorContext.prompt_stats)")
    stats, ids = context.prompt_stats, context.sample_ids
    post = BetaPosteriors(lam=d.lam, eps=d.eps, scale=d.scale, include_current=d.include_current)
    for sid in ids:
        e = stats.get(sid)
        if e is not None and "dbb" in e["extra"]:
            post.ab[sid] = tuple(e["extra"]["dbb"])
    top = d.max_reward
    adv = post.advantages(ids, rewards / top, None if bonus is None else bonus / top)
    for sid in dict.fromkeys(ids):
        stats.extra(sid)["dbb"] = list(post.ab[sid])
    return adv
