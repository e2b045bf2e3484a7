"""The contract every rollout engine keeps, and the record every engine returns.

`RolloutEngine` is everything the training package may touch on an engine; the capability
protocols below it are what some engines add (segmented generation, a server's weight versions,
generation ahead, an in-process model). `tests/rollout/test_engine_contract.py` holds both ways:
every engine (HF, vLLM, server, lagged) has every `RolloutEngine` member, and `mmrlvr/train/`
reads nothing off an engine that no protocol here declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import torch

from mmrlvr.types import Completion, Sample


@runtime_checkable
class RolloutEngine(Protocol):
    """What the loop, the step and evaluation use: sample groups, sync weights, re-encode prompts."""

    processor: Any  # the policy's processor: the step re-encodes the prompts the learner reads with it
    suppress_ids: list[int]  # ids the sampler never draws (media placeholders); the learner masks them too
    pad_id: int  # the id completions are right-padded with

    def rollout(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
                max_new_tokens: int | None = None, return_logprobs: bool = False) -> "RolloutOutput":
        """len(samples) * group_size completions, groups contiguous, as one `RolloutOutput`."""

    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        """The completions of `rollout`, alone."""

    def sync_weights(self, model) -> None:
        """Make the engine sample from the policy's current weights."""

    def close(self) -> None:
        """Release what the engine holds (a background thread); the run calls it on every exit."""


class SegmentedEngine(RolloutEngine, Protocol):
    """Generation that stops at a prefix length to decide which rows go on (a method that prunes
    rows at their prefix; HF engine)."""

    def rollout_segmented(self, samples: Sequence[Sample], group_size: int, sampling, seed: int,
                          prefix_tokens: int, keep, greedy: bool = False, **kw): ...


class VersionedEngine(RolloutEngine, Protocol):
    """A server whose batches carry the weight version they were sampled with (`policy_version`)."""

    version: int  # weight updates the server has loaded
    synced_version: int  # the version of the learner's weights after the last `sync_weights`


class AheadEngine(RolloutEngine, Protocol):
    """Generates step t+1's first round while step t trains (`rollout.async_steps`)."""

    def generate_ahead(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> None: ...


class LocalEngine(RolloutEngine, Protocol):
    """Samples in this process from the policy module itself (HF): a collect step may score its own rows with it."""

    model: Any


CAPABILITIES = (SegmentedEngine, VersionedEngine, AheadEngine, LocalEngine)


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
