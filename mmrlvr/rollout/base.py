"""The contract every rollout engine keeps."""

from __future__ import annotations

from typing import Protocol, Sequence

from mmrlvr.types import Completion, Sample


class RolloutEngine(Protocol):
    def generate(
        self, samples: Sequence[Sample], group_size: int, sampling, seed: int
    ) -> list[Completion]:
        """Return len(samples) * group_size completions, each group contiguous."""

    def sync_weights(self, model) -> None:
        """Make the engine sample from the policy's current weights."""
