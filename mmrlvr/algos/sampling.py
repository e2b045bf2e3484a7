"""Group filters and length shaping (DAPO): which groups carry signal, what long answers cost."""

from __future__ import annotations

import torch

from mmrlvr.algos.advantages import flat_groups


def informative_groups(rewards: torch.Tensor) -> torch.Tensor:
    """(B, G) rewards -> (B,) bool: not a flat group (`mmrlvr.algos.advantages.flat_groups`, the
    one definition: fewer than 2 scorable rewards, or all exactly equal, which is exactly when
    every estimator gives the group zero advantage).

    A group where every completion scores the same has zero GRPO advantage everywhere, so it only
    costs compute; DAPO's dynamic sampling drops such groups and samples more.
    """
    return ~flat_groups(rewards).squeeze(1)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO soft overlong punishment, (N,) lengths -> (N,) penalties <= 0.

    0 up to max_len - buffer, then falling linearly to -factor at max_len (and staying there).
    """
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_len - buffer
    over = (lengths.float() - start).clamp(min=0.0)
    return -factor * (over / buffer).clamp(max=1.0)


def longest_run(mask: torch.Tensor) -> torch.Tensor:
    """(N, T) 0/1 mask -> (N,) the length of each row's longest run of consecutive 1s.

    On an episode's policy mask (times the completion mask) this is its longest policy turn:
    inserted messages (at least one token each) separate the turns."""
    m = mask.long()
    if m.shape[-1] == 0:
        return torch.zeros(m.shape[0], dtype=torch.long)
    idx = torch.arange(m.shape[1], device=m.device).expand_as(m)
    last_zero = torch.where(m == 0, idx, torch.full_like(idx, -1)).cummax(dim=1).values
    return torch.where(m == 1, idx - last_zero, torch.zeros_like(idx)).max(dim=1).values


def truncation_mask(truncated: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero the loss mask of truncated completions (N,) so unfinished answers teach nothing."""
    return mask * (~truncated.bool()).unsqueeze(1).to(mask.dtype)


class GroupCollector:
    """Dynamic sampling bookkeeping: keep informative groups over rounds until `target` are held.

    Call `add(rewards, payload_per_group)` after each round; `done` says when to stop. Rounds are
    capped by the caller's `max_rounds`; if the cap is hit the batch is topped up with dropped
    groups so a step always has `target` groups (their advantages are zero).
    """

    def __init__(self, target: int, filter_groups: bool = True):
        self.target = target
        self.filter_groups = filter_groups
        self.kept: list = []
        self.dropped: list = []
        self.rounds = 0

    def add(self, rewards: torch.Tensor, groups: list) -> None:
        keep = informative_groups(rewards) if self.filter_groups else torch.ones(len(groups), dtype=torch.bool)
        self.add_round(keep, groups)

    def add_round(self, keep: torch.Tensor, groups: list) -> None:
        """One round's groups with the (B,) decision, made elsewhere, of which to keep."""
        self.rounds += 1
        for k, g in zip(keep.tolist(), groups):
            (self.kept if k else self.dropped).append(g)

    @property
    def done(self) -> bool:
        return len(self.kept) >= self.target

    def batch(self) -> list:
        out = self.kept[: self.target]
        if len(out) < self.target:
            out += self.dropped[: self.target - len(out)]
        return out
