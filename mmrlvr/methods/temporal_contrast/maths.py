"""Temporal contrast: reward answers that need the frames in order (T-GRPO and a TGPO-style variant).

For each video prompt b the policy also answers the same frames shuffled (S samples, scored, not
trained on). With `score` the first reward term's score (NaN, unscorable, counts as 0) and
`correct = score > threshold`:

    p_b  = mean over the G ordered completions of score        (ordered accuracy)
    p~_b = mean over the S shuffled completions of score       (shuffled accuracy)

For right/wrong scores (0 or 1) p is the share correct; with partial credit (tiou, iou, order) it
is the mean score, as Video-R1 compares (`acc_mean`, below), and `correct` decides only which
answers are paid.

T-GRPO (Video-R1, Feng et al. 2025, eq. of r_t), per prompt:

    bonus_bg = alpha * correct_bg * [p_b > mu * p~_b]

TGPO-style, calibrated by how much the prompt's accuracy depends on order, normalised over the
batch by its largest gap so that a bonus never exceeds alpha:

    gap_b    = max(0, p_b - mu * p~_b)
    bonus_bg = alpha * correct_bg * gap_b / max_b' gap_b'      (0 when every gap is 0)

Video-R1's released code (tulerfeng/Video-R1, src/r1-v/src/open_r1/trainer/grpo_trainer.py
lines 611-624 at 59d65c3) and how ours compares:
- it compares `acc_mean >= 0.8 * shuffled_acc_mean` over the device's batch (one prompt per
  device in its scripts, so per prompt there too); we compare per prompt with the paper's strict
  ">" and mu = 1: no bonus when shuffling does not hurt (p = p~);
- it pays an answer whose accuracy reward is `> 0.1` (line 618): our default threshold, so
  partial credit (tiou, iou, order) is paid;
- its accuracies are the mean accuracy rewards (lines 614-615, `rewards_per_func[:, 0].mean()`),
  partial credit as a fraction: ours are the same means (`mean_score`), not the shares above the
  threshold (the two differ only with partial credit); so `mu: 0.8` is its rule but for ">=".

A bonus on every correct answer of a binary verifier is affine in the group's rewards
(r -> (1 + alpha) r), so an advantage estimator that divides by the group's std (`grpo`) removes
it exactly: use one that does not (`dr_grpo`), as the contrast configs do.
Shapes: B prompts, G ordered, S shuffled.
"""

from __future__ import annotations

import math

import torch

METHODS = ("tgrpo", "tgpo")


DEFAULT_THRESHOLD = 0.1  # Video-R1: `rewards_per_func[:, 0] > 0.1` (grpo_trainer.py line 618)


def correct_mask(scores: torch.Tensor, threshold: float = DEFAULT_THRESHOLD) -> torch.Tensor:
    """(B, K) scores -> (B, K) float 1/0: score > threshold; NaN (unscorable) is 0."""
    return (torch.nan_to_num(scores, nan=-math.inf) > threshold).float()


def accuracy(scores: torch.Tensor, threshold: float = DEFAULT_THRESHOLD) -> torch.Tensor:
    """(B, K) scores -> (B,) share of correct completions per prompt."""
    return correct_mask(scores, threshold).mean(dim=1)


def mean_score(scores: torch.Tensor) -> torch.Tensor:
    """(B, K) scores -> (B,) mean score per prompt, NaN (unscorable) as 0: what the gate compares."""
    return torch.nan_to_num(scores, nan=0.0).mean(dim=1)


def tgrpo_bonus(ordered: torch.Tensor, shuffled: torch.Tensor, alpha: float = 0.3, mu: float = 1.0,
                threshold: float = DEFAULT_THRESHOLD) -> torch.Tensor:
    """(B, G) ordered scores, (B, S) shuffled scores -> (B, G) bonus (see the module docstring)."""
    p, p_shuf = mean_score(ordered), mean_score(shuffled)
    gate = (p > mu * p_shuf).float()
    return alpha * correct_mask(ordered, threshold) * gate[:, None]


def tgpo_bonus(ordered: torch.Tensor, shuffled: torch.Tensor, alpha: float = 0.3, mu: float = 1.0,
               threshold: float = DEFAULT_THRESHOLD) -> torch.Tensor:
    """(B, G) ordered scores, (B, S) shuffled scores -> (B, G) gap-calibrated bonus."""
    gap = (mean_score(ordered) - mu * mean_score(shuffled)).clamp(min=0.0)
    top = gap.max() if gap.numel() else gap.new_zeros(())
    scale = gap / top if top > 0 else torch.zeros_like(gap)
    return alpha * correct_mask(ordered, threshold) * scale[:, None]


def temporal_bonus(method: str, ordered: torch.Tensor, shuffled: torch.Tensor, alpha: float, mu: float,
                   threshold: float = DEFAULT_THRESHOLD) -> tuple[torch.Tensor, dict]:
    """(B, G) bonus of `method` and its stats: temporal/ordered_acc, shuffled_acc (shares of
    answers above the threshold, the same as the compared means for right/wrong scores), bonus_frac."""
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
