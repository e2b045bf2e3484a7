"""HiLL's hint reward, gates and hint choice: pure functions over one hard prompt's numbers.

As the authors' released code computes them (Andree-9/HiLL at 195d94e; "HU" below is
`verl/trainer/ppo/hinter_utils.py`, "HT" `verl/trainer/ppo/hill_ray_trainer.py`):
- a hint passes three gates in order (HT:533-570): a `<hint>...</hint>` block with text
  (`parse_hint`), no leak of the gold answer (`leaks_answer`, HU:80-132), and a hinted prompt no
  longer than the prompt limit; a hint that fails any gate is not re-rolled and scores
  `GATE_FAILURE_PENALTY` (HU:33, HU:257-259);
- hint reliance of a re-rollout y (HT:721-789): mean_t log pi(y_t | Q, y_<t) - mean_t log pi(y_t | Q+hint, y_<t);
  its mean over the *correct* re-rollouts only (`mean_reliance`, HU:402-413);
- the reward (`hint_reward`, HU:216-297): with p = share of the N re-rollouts scoring > 0.5,
  0 if p is 0 or 1, else prob_term * exp(min(reliance, 0) / T) for the transfer-weighted types,
  prob_term = 1 - p^N - (1-p)^N (non_deg) or p(1-p) (variance);
- the hint that replaces the group (`best_hint`, HU:437-444, HT:808-817): the first argmax of the
  rewards, and only if its prob_term beats the original group's (0 for an all-incorrect group).
"""

from __future__ import annotations

import math
import re

import torch

POSITIVE_THRESHOLD = 0.5
"""A completion counts as correct iff its reward is above this (HT:72)."""
GATE_FAILURE_PENALTY = -0.2
"""A hint that fails a gate (no hint, answer leaked, prompt too long) scores this (HU:33)."""
REWARD_TYPES = ("transfer_weighted_non_deg", "transfer_weighted_variance", "non_deg", "variance")
"""HiLL's hinter reward types (HT:93-97); the paper's run uses the first (`run_hill.sh:43`)."""
_HINT = re.compile(r"<hint>\s*(.*?)\s*</hint>", re.IGNORECASE | re.DOTALL)
# HiLL's revealing phrases for a gold of <= 2 characters ("= {g}", "equals {g}", "is {g}", "answer is {g}",
# "answer: {g}", "result is {g}", "value is {g}", "equal to {g}"), here as whole words: "this 3" is not
# "is 3", and "is 3" does not reveal "3" in "is 3.5" or "is 30"
_SHORT_LEAK = r"(?:=|(?<!\w)(?i:equals|is|answer is|answer:|result is|value is|equal to)) {}(?!\w|[.,]\d)"


def parse_hint(text: str) -> str | None:
    """The first `<hint>...</hint>` block's text, stripped (HT:534-541); None if absent or empty."""
    match = _HINT.search(text)
    if not match:
        return None
    return match.group(1).strip() or None


def leaks_answer(hint: str, gold: str) -> bool:
    """HiLL's leak gate (HU:80-132): `\\boxed{gold}` anywhere; for a gold of <= 2 characters only
    revealing phrases ("= g", "is g", ...), else gold as a substring (either case).

    Where this departs from HU: a short gold is matched as a whole word after a whole-word phrase,
    and a letter in it with its case (the phrase in any case). HU matches substrings of the lowered
    text, so for the option "A" every "is a right triangle" leaked (0.5-2.4 % of prose lines per
    letter were flagged, and a flagged caption or hint is not rewarded)."""
    g, text = (gold or "").strip(), hint.strip()
    if not g:
        return False
    if f"\\boxed{{{g}}}" in text:
        return True
    if len(g) <= 2:
        return re.search(_SHORT_LEAK.format(re.escape(g)), text) is not None
    return g in text or g.lower() in text.lower()


def sequence_mean_logprob(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, T) token log-probs and mask -> (N,) the mean over each row's tokens (HT:779-781)."""
    m = mask.to(logprobs.dtype)
    return (logprobs * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def mean_reliance(reliance: torch.Tensor, rewards: torch.Tensor, threshold: float = POSITIVE_THRESHOLD) -> float | None:
    """(N,) reliance per re-rollout and (N,) rewards -> the mean over the correct ones; None if none is correct."""
    correct = rewards > threshold
    if not bool(correct.any()):
        return None
    return float(reliance[correct].float().mean())


def prob_term(rewards: torch.Tensor, reward_type: str, threshold: float = POSITIVE_THRESHOLD) -> float:
    """(N,) rewards of one hint's re-rollouts -> the base term: 0 when all or none are correct, else
    1 - p^N - (1-p)^N (non_deg types: the chance N draws are mixed) or p(1-p) (variance types)."""
    n = rewards.numel()
    p = float((rewards > threshold).float().mean()) if n else 0.0
    if p in (0.0, 1.0):
        return 0.0
    if reward_type.endswith("non_deg"):
        return 1.0 - p ** n - (1.0 - p) ** n
    return p * (1.0 - p)


def hint_reward(rewards: torch.Tensor | None, passed: bool, reward_type: str = "transfer_weighted_non_deg",
                reliance: float | None = None, temperature: float = 0.3, original_prob: float = 0.0,
                threshold: float = POSITIVE_THRESHOLD) -> tuple[float, float]:
    """One hint's (reward, prob_term) (HU:216-297, then HU:426-432).

    `rewards`: (N,) of its re-rollouts (None when it failed a gate); `reliance`: `mean_reliance`
    of them (None: weight 1). A positive reward whose prob_term does not beat `original_prob` (the
    original group's, 0 for an all-incorrect one) is cut to 0; gate penalties stay."""
    if not passed or rewards is None:
        return GATE_FAILURE_PENALTY, 0.0
    base = prob_term(rewards, reward_type, threshold)
    if base == 0.0:
        return 0.0, 0.0
    reward = base
    if reward_type.startswith("transfer_weighted") and reliance is not None:
        reward = base * math.exp(min(reliance, 0.0) / temperature)
    if base <= original_prob and reward > 0.0:
        reward = 0.0
    return reward, base


def best_hint(rewards: list[float], prob_terms: list[float], original_prob: float = 0.0) -> int | None:
    """The hint whose re-rollouts replace the group: the first with the highest reward (strict >,
    HU:437-444), if its prob_term beats the original group's (HT:808-817); None: keep the group."""
    if not rewards:
        return None
    best = max(range(len(rewards)), key=lambda m: (rewards[m], -m))
    return best if prob_terms[best] > original_prob else None
