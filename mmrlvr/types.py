"""Records that flow through one RL step.

Shape letters: B prompts, G completions per prompt, N = B * G sequences, T completion tokens.
Groups may differ in size (a replayed or hinted prompt may bring another G): then rewards are
(B, G_max) padded with NaN after each group's `group_sizes[b]` members, and the (N, ...) row
tensors hold only the real completions, group after group (N = sum of group_sizes). NaN inside
a group's first `group_sizes[b]` entries still means "unscorable".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # verifier worker processes import this module without paying for torch
    import torch


@dataclass(frozen=True)
class Sample:
    """One prompt with its ground truth, kept together so they can never drift apart."""

    id: str
    messages: tuple[dict, ...]  # chat messages; image/video entries are placeholders
    reference: Any  # what the verifier compares against
    verifier: str = "count"  # registry name or "file.py:fn"
    images: tuple[Any, ...] = ()  # PIL images, in the order their placeholders appear
    videos: tuple[Any, ...] = ()  # VideoRef (decoded at encode time), anything with load(), or frames
    meta: dict = field(default_factory=dict)  # task details verifiers may read (options, sizes)
    target: str | None = None  # a teacher completion, used only by supervised warm starts


@dataclass(frozen=True)
class Verdict:
    """A verifier's answer: a score in [0, 1], why, and named sub-scores for metrics."""

    score: float
    reason: str = ""
    parts: dict = field(default_factory=dict)


@dataclass
class Completion:
    """One sampled continuation of a sample's prompt."""

    sample_index: int  # index of the prompt in the batch (groups are contiguous)
    text: str
    token_ids: list[int]
    truncated: bool  # hit max_new_tokens without an end-of-turn token


@dataclass
class RolloutBatch:
    """One RL step's scored rollouts: everything the update needs, built once per step."""

    samples: list  # B prompts
    prompt_inputs: dict  # processor outputs for the N = B*G rows (left padded), groups contiguous
    completion_ids: "torch.Tensor"  # (N, T) sampled tokens, right padded
    completion_mask: "torch.Tensor"  # (N, T) 1 for sampled tokens
    truncated: "torch.Tensor"  # (N,) bool: hit max_new_tokens without an end token
    rewards: "torch.Tensor"  # (B, G) verifier rewards, NaN where unscorable
    texts: list  # N completion texts
    verdicts: list  # N verdicts (of the first reward term)
    metrics: dict  # rollout/..., reward/..., time/... of this step
    sampler_logprobs: "torch.Tensor | None" = None  # (N, T) what the sampler drew each token with, 0 on padding
    group_sizes: list | None = None  # B sizes when groups differ; None: rectangular (every group G)
    scored: list | None = None  # (sample id, [G rewards, NaN unscorable]) of every group scored this
    # step, trained on or not (dynamic sampling drops some): what prompt sources and statistics learn from

    @property
    def sample_ids(self) -> list[str]:
        """The B prompts' ids, in group order (what prompt sources and per-prompt statistics key on)."""
        return [s.id for s in self.samples]

    def sizes(self) -> list[int]:
        """Each group's number of completions."""
        if self.group_sizes is not None:
            return list(self.group_sizes)
        return [self.rewards.shape[1]] * self.rewards.shape[0]
