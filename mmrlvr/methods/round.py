"""The records a `collect` hook reads and returns: one scored sampling round, and what it may use.

They live below the recipe so that a method's collect step (in its own folder) and the step that
calls it (`mmrlvr.recipe.step`) share them without either importing the other.
"""

from __future__ import annotations

import dataclasses

import torch

from mmrlvr.types import Group, Sample


@dataclasses.dataclass
class Round:
    """One sampling round after scoring: B prompts, their groups, and which groups are kept."""

    prompts: list[Sample]
    out: object  # the engine's RolloutOutput (completions, ids, mask, sampler_logprobs)
    rewards: torch.Tensor  # (B, G)
    verdicts: list  # B * G
    keep: torch.Tensor  # (B,) bool
    metrics: dict
    index: int  # 0 for the first round of the step
    gen_s: float = 0.0  # seconds spent generating (the rest of the round is scoring)
    extra_groups: list[Group] = dataclasses.field(default_factory=list)
    """Groups a collect step adds beyond the engine's (a demonstration, a hinted prompt); their sizes
    may differ from G. They are kept (trained on) after the round's own groups."""
    bonus: torch.Tensor | None = None  # (B, G) added by collect steps inside `rewards` (None: nothing)
    replaced: dict[int, Group] = dataclasses.field(default_factory=dict)
    """{b: group} trained on instead of the round's group b (a hinted re-rollout); the prompt source
    and statistics still hear the round's own group b."""
    derived_groups: list[Group] = dataclasses.field(default_factory=list)
    """Groups a collect step made from the round's prompts (a hinter's prompts): trained on after
    the round's own, never fed back to the prompt source (their prompts are not the source's)."""


@dataclasses.dataclass
class CollectContext:
    """What collect steps may use: the engine and scorer (to sample or score more), the resolved
    config, the round's seed and the step, and each active method's run-time state by name (what
    its `state` hook built; a collect step reads and updates its own, and it is checkpointed)."""

    engine: object
    scorer: object
    cfg: object
    seed: int
    step: int
    states: dict = dataclasses.field(default_factory=dict)
