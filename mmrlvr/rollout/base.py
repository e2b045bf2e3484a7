"""The contract every rollout engine keeps, and the record every engine returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from mmrlvr.types import Completion, Sample


class RolloutEngine(Protocol):
    def generate(
        self, samples: Sequence[Sample], group_size: int, sampling, seed: int
    ) -> list[Completion]:
        """Return len(samples) * group_size completions, each group contiguous."""

    def sync_weights(self, model) -> None:
        """Make the engine sample from the policy's current weights."""


@dataclass
class RolloutOutput:
    """What every engine returns. `sampler_logprobs` is part of the contract: the log-probs of the
    sampled tokens under the distribution the sampler drew them from after the learner's own
    temperature and suppressed ids (HF: recorded from generate's scores; vLLM: processed_logprobs),
    0 on padding. The step reads them as pi_old where the sampler is the learner and to correct
    the sampler/learner gap otherwise."""

    completions: list[Completion]  # N = B * G, groups contiguous
    prompt_inputs: dict  # processor outputs for the B prompts (left padded)
    completion_ids: torch.Tensor  # (N, T) right padded
    completion_mask: torch.Tensor  # (N, T)
    sampler_logprobs: torch.Tensor | None = None  # (N, T) log-probs the sampler drew with
    policy_version: int | None = None  # server engine: weight updates the server had loaded when it sampled
    gen_seconds: float | None = None  # generated ahead (rollout.async_steps): the generation's own seconds
