"""PRCO's reward math (Observer/Solver on one policy): the leak gate and the Observer's utility.

PRCO's training code is not public (Dtc7w3PQ/PRCO at 69d094b: README "Release training code"
unchecked); its abstract says only that the Solver is rewarded by the verifiable outcome and the
Observer by "a utility reward derived from the Solver's downstream success". Every formula here is
OUR READING (docs/explanation/episodes.md#observer-and-solver-prco):

- utility of caption j: u_j = mean over its K Solver answers of their rewards r_jk (the Solver's
  success rate given the caption), unscorable answers (NaN) left out; NaN if none is scorable;
- leak gate: a caption that leaks the answer gets `leak_reward` (0 unless set) instead of u_j.
  It leaks when the verifier accepts the caption itself as a correct answer, and (gate
  `verifier+string`) also when HiLL's string gate finds the gold answer in it (a public gate of a
  close method: Andree-9/HiLL at 195d94e, `verl/trainer/ppo/hinter_utils.py:80-132`, ported below).
"""

from __future__ import annotations

import torch

from mmrlvr.methods.hill.maths import leaks_answer

LEAK_GATES = ("verifier+string", "verifier", "none")
ACCEPTED = 0.5  # a verifier score above this is a correct answer (HiLL's POSITIVE_THRESHOLD)

def string_leak(text: str, gold) -> bool:
    """HiLL's string gate (`mmrlvr.methods.hill.maths.leaks_answer`, their hinter_utils.py:80-132), the gold as text."""
    return leaks_answer(text, str(gold))


def leaked(captions: list[str], golds: list, caption_scores: torch.Tensor, gate: str) -> torch.Tensor:
    """(C,) bool: which captions leak. `caption_scores` (C,): the verifier's score of each caption
    read as an answer (NaN: unscorable, not a leak)."""
    if gate not in LEAK_GATES:
        raise ValueError(f"unknown leak gate {gate!r}; known: {', '.join(LEAK_GATES)}")
    if gate == "none":
        return torch.zeros(len(captions), dtype=torch.bool)
    out = caption_scores.nan_to_num(0.0) > ACCEPTED
    if gate == "verifier+string":
        out = out | torch.tensor([string_leak(c, str(g)) for c, g in zip(captions, golds)], dtype=torch.bool)
    return out


def utility_rewards(solver_rewards: torch.Tensor, leak: torch.Tensor, leak_reward: float = 0.0) -> torch.Tensor:
    """(C, K) Solver rewards of each caption's K answers, (C,) leak flags -> (C,) Observer rewards:
    the mean of the scorable answers' rewards (NaN if none), `leak_reward` where the caption leaks."""
    valid = ~torch.isnan(solver_rewards)
    n = valid.sum(dim=1)
    mean = torch.where(valid, solver_rewards, torch.zeros_like(solver_rewards)).sum(dim=1) / n.clamp(min=1)
    mean = torch.where(n > 0, mean, torch.full_like(mean, float("nan")))
    return torch.where(leak, torch.full_like(mean, float(leak_reward)), mean)
