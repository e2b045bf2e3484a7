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


class CompletionText(str):
    """A completion's text that also carries its token ids, for reward functions that ask for
    them (TRL's `completion_ids`, EasyR1's `response_length`); everywhere else it is the str."""

    def __new__(cls, text: str, token_ids=()):
        obj = super().__new__(cls, text)
        obj.token_ids = tuple(token_ids)
        return obj

    def __reduce__(self):  # crosses to verifier worker processes with its ids
        return (CompletionText, (str(self), self.token_ids))


@dataclass
class Completion:
    """One sampled continuation of a sample's prompt."""

    sample_index: int  # index of the prompt in the batch (groups are contiguous)
    text: str
    token_ids: list[int]
    truncated: bool  # hit max_new_tokens without an end-of-turn token
    policy_mask: list | None = None  # episodes: 1 per policy token of token_ids, 0 per inserted one
    media: dict | None = None  # episodes: inserted images' processor outputs (pixel_values, image_grid_thw)
    episode: dict | None = None  # episodes: turns, what ended it, roles, each turn's text


@dataclass(frozen=True, eq=False)
class Group:
    """One prompt's completions as a step trains on them. A collect strategy adds groups as this
    record; a plain tuple in field order (the bonus left out or not) is read as one by `Group.of`,
    so a strategy written before the record still works."""

    prompt: Sample
    completions: list[Completion]  # G_b of them; G_b may differ from rollout.group_size
    rewards: "torch.Tensor"  # (G_b,) NaN: unscorable
    verdicts: list[Verdict]  # G_b
    sampler_logprobs: list  # per completion its tokens' sampler log-probs (a tensor), or None each
    bonus: "torch.Tensor | None" = None  # (G_b,) what the strategies added inside `rewards`; None: nothing

    @classmethod
    def of(cls, group: "Group | tuple") -> "Group":
        return group if isinstance(group, cls) else cls(*group)


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
    policy_mask: "torch.Tensor | None" = None  # (N, T) episodes: 1 on the policy's own tokens, 0 on
    # inserted tool results, prompts and images (context only); None: every sampled token is the policy's
    scored: list | None = None  # (sample id, [G rewards, NaN unscorable]) of every group scored this
    # step, trained on or not (dynamic sampling drops some): what prompt sources and statistics learn from
    policy_version: int | None = None  # server engine: the oldest policy version that sampled this batch
    bonus: "torch.Tensor | None" = None  # (B, G) what collect strategies added to the verifiers' rewards
    # (temporal contrast), inside `rewards`, NaN-padded like them; None: nothing added

    @property
    def sample_ids(self) -> list[str]:
        """The B prompts' ids, in group order (what prompt sources and per-prompt statistics key on)."""
        return [s.id for s in self.samples]

    def row_rewards(self) -> list[float]:
        """(N,) each row's reward, the NaN padding of shorter groups left out."""
        return [float(x) for b, n in enumerate(self.sizes()) for x in self.rewards[b, :n].tolist()]

    def sizes(self) -> list[int]:
        """Each group's number of completions."""
        if self.group_sizes is not None:
            return list(self.group_sizes)
        return [self.rewards.shape[1]] * self.rewards.shape[0]

    def row_groups(self) -> list[tuple[int, int]]:
        """(prompt b, place j in its group) of each of the N rows, groups contiguous: row i's
        sample is samples[b] and its reward rewards[b, j], whatever the groups' sizes."""
        return [(b, j) for b, n in enumerate(self.sizes()) for j in range(n)]
