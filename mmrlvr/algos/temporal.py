"""Temporal contrast: reward answers that need the frames in order (T-GRPO and a TGPO-style variant).

For each video prompt b the policy also answers the same frames shuffled (S samples, scored, not
trained on). With `correct = score >= threshold` (NaN, unscorable, counts as wrong):

    p_b  = mean over the G ordered completions of correct      (ordered accuracy)
    p~_b = mean over the S shuffled completions of correct     (shuffled accuracy)

T-GRPO (Video-R1, Feng et al. 2025), per prompt:

    bonus_bg = alpha * correct_bg * [p_b >= mu * p~_b]

TGPO-style, calibrated by how much the prompt's accuracy depends on order, normalised over the
batch by its largest gap so that a bonus never exceeds alpha:

    gap_b    = max(0, p_b - mu * p~_b)
    bonus_bg = alpha * correct_bg * gap_b / max_b' gap_b'      (0 when every gap is 0)

Everything is per prompt: a prompt's bonus never depends on other prompts' accuracies except
through the TGPO normalisation. Video-R1 compared batch-mean accuracies (and with mu = 0.8), so
one prompt's shuffled luck moved every prompt's bonus. Shapes: B prompts, G ordered, S shuffled.
"""

from __future__ import annotations

import torch

METHODS = ("tgrpo", "tgpo")


def correct_mask(scores: torch.Tensor, threshold: float = 1.0) -> torch.Tensor:
    """(B, K) scores -> (B, K) float 1/0; NaN (unscorable) is 0."""
    return (torch.nan_to_num(scores, nan=-1.0) >= threshold).float()


def accuracy(scores: torch.Tensor, threshold: float = 1.0) -> torch.Tensor:
    """(B, K) scores -> (B,) share of correct completions per prompt."""
    return correct_mask(scores, threshold).mean(dim=1)


def tgrpo_bonus(ordered: torch.Tensor, shuffled: torch.Tensor, alpha: float = 0.3, mu: float = 1.0,
                threshold: float = 1.0) -> torch.Tensor:
    """(B, G) ordered scores, (B, S) shuffled scores -> (B, G) bonus (see the module docstring)."""
    p, p_shuf = accuracy(ordered, threshold), accuracy(shuffled, threshold)
    gate = (p >= mu * p_shuf).float()
    return alpha * correct_mask(ordered, threshold) * gate[:, None]


def tgpo_bonus(ordered: torch.Tensor, shuffled: torch.Tensor, alpha: float = 0.3, mu: float = 1.0,
               threshold: float = 1.0) -> torch.Tensor:
    """(B, G) ordered scores, (B, S) shuffled scores -> (B, G) gap-calibrated bonus."""
    gap = (accuracy(ordered, threshold) - mu * accuracy(shuffled, threshold)).clamp(min=0.0)
    top = gap.max() if gap.numel() else gap.new_zeros(())
    scale = gap / top if top > 0 else torch.zeros_like(gap)
    return alpha * correct_mask(ordered, threshold) * scale[:, None]


def temporal_bonus(method: str, ordered: torch.Tensor, shuffled: torch.Tensor, alpha: float, mu: float,
                   threshold: float = 1.0) -> tuple[torch.Tensor, dict]:
    """(B, G) bonus of `method` and its stats: temporal/ordered_acc, shuffled_acc, bonus_frac."""
    fn = {"tgrpo": tgrpo_bonus, "tgpo": tgpo_bonus}.get(method)
    if fn is None:
        raise ValueError(f"unknown temporal contrast method {method!r}; known: {', '.join(METHODS)}")
    bonus = fn(ordered, shuffled, alpha, mu, threshold)
    stats = {
        "temporal/ordered_acc": accuracy(ordered, threshold).mean(),
        "temporal/shuffled_acc": accuracy(shuffled, threshold).mean(),
        "temporal/bonus_frac": (bonus > 0).float().mean(),
        "temporal/bonus_mean": bonus.mean(),
    }
    return bonus, stats
