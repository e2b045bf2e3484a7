"""Per-prompt Beta posteriors for `dbb`, kept across steps and saved in checkpoints.

`BetaPosteriors.advantages(sample_ids, rewards)` reads each prompt's (alpha, beta) (the prior
(1, 1) on a first visit), applies `dbb` and writes the updated posteriors back, so the learner
needs one call per rollout batch and `state_dict()` in its run state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mmrlvr.algos.advantages import dbb


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
