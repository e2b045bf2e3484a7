"""arrol's pure math (arXiv 2603.24840, "Prune as You Generate"): which over-generated rows survive
the prefix, and how well a score separates successes from failures.

No code is public (the authors' repository holds a README only); the paper's text gives the idea:
over-generate each group, predict each partial rollout's success with a learned quality head, prune
early so the survivors are correctness-balanced toward a target positive share rho (0.5 in the
paper). Every rule below that fixes a detail the text leaves open is marked OUR READING.

Shapes: R rows of one generation call (whole groups), M rows per prompt (the over-generated group),
G survivors per prompt (`rollout.group_size`).
"""

from __future__ import annotations

import math

import torch


def rows_per_prompt(group_size: int, over_generation: float) -> int:
    """M = ceil(over_generation * G): the rows generated per prompt (OUR READING of the factor).
    The product is rounded to 9 decimals first so 1.1 * 50 is 55, not 56."""
    return max(group_size, math.ceil(round(over_generation * group_size, 9)))


def balanced_survivors(scores: torch.Tensor, keep: int, target_pos_share: float) -> list[int]:
    """Indices (ascending) of the `keep` survivors of one group of M candidates, scores (M,) the
    predicted success probabilities.

    OUR READING of "steer the survivors toward a target positive share rho": k+ = round(rho * keep)
    survivors are the k+ highest scores (the likeliest successes), the other keep - k+ the lowest
    scores among the rest (the likeliest failures); with a discriminative head the survivors' share
    of successes then approaches rho whenever the group holds both kinds. Ties go to the lower
    position (a stable sort), so the choice is deterministic. `round` is Python's (half to even).
    """
    m = scores.shape[0]
    if not 0 < keep <= m:
        raise ValueError(f"keep={keep} survivors of {m} candidates")
    k_pos = min(keep, max(0, round(target_pos_share * keep)))
    order = torch.sort(-scores.float(), stable=True).indices.tolist()  # likeliest first, ties by position
    top = order[:k_pos]
    rest = [i for i in sorted(range(m), key=lambda i: (scores[i].item(), i)) if i not in set(top)]
    return sorted(top + rest[: keep - k_pos])


def select_rows(scores: torch.Tensor, prompt_index: torch.Tensor, group_position: torch.Tensor, keep: int,
                target_pos_share: float, trusted: bool) -> list[bool]:
    """(R,) keep decisions for one call's rows, whole groups: per prompt, `balanced_survivors` of its
    rows when the head is `trusted`, else the fallback, its first `keep` group positions (the rows are
    exchangeable draws, so this is a uniform random subset, and it does not depend on the head)."""
    out = [False] * scores.shape[0]
    for p in dict.fromkeys(prompt_index.tolist()):
        rows = (prompt_index == p).nonzero().flatten()
        rows = rows[torch.argsort(group_position[rows], stable=True)]
        if trusted:
            chosen = [rows[i].item() for i in balanced_survivors(scores[rows], keep, target_pos_share)]
        else:
            chosen = rows[:keep].tolist()
        for r in chosen:
            out[r] = True
    return out


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve of `scores` (n,) for binary `labels` (n,): the probability that a
    random positive outscores a random negative, ties counting one half (Mann-Whitney U / (n+ n-)).
    NaN when one class is absent (no ranking to judge)."""
    s, y = scores.double().flatten(), labels.bool().flatten()
    pos, neg = s[y], s[~y]
    if pos.numel() == 0 or neg.numel() == 0:
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).double() + 0.5 * (diff == 0).double()).mean())


def within_group_auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean AUROC inside each group (rows of (B, G) scores and labels) that holds both classes: how
    well the scores rank a prompt's own rows, which is all the selection uses (a pooled AUROC also
    credits telling easy prompts from hard ones). NaN when no group is mixed."""
    per = [auroc(s, y) for s, y in zip(scores, labels) if 0 < int(y.sum()) < y.numel()]
    return sum(per) / len(per) if per else float("nan")


def all_equal_share(rewards: torch.Tensor) -> float:
    """Share of groups (rows of (B, G) rewards, NaN = absent) whose present rewards are all equal:
    the groups that give GRPO no signal."""
    if rewards.shape[0] == 0:
        return 0.0
    flat = [(r[~r.isnan()].max() - r[~r.isnan()].min()).item() == 0 if (~r.isnan()).any() else True for r in rewards]
    return sum(flat) / len(flat)
