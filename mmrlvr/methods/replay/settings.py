"""Prompt replay's settings (`sample_efficiency.replay.*`): the section's dataclass, every key with
its one-line doc.

Registered as the config section `sample_efficiency.replay` (`mmrlvr.config.sections.SECTIONS`,
whose plug-in module `mmrlvr.methods.sections` imports this file): the config builds, checks and
prints it without importing the method. Keep this file light (dataclasses only): loading a
config reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrlvr.config.sections import SECTIONS


@SECTIONS.register("sample_efficiency.replay")
@dataclass
class ReplayConfig:
    enabled: bool = False
    """Prompt replay (arXiv 2603.21177): the prompt source `replay` refills up to `fraction` of each
    batch with earlier prompts whose pass rate was near 0.5, regenerating their rollouts."""
    fraction: float = 0.5
    """Most replays per batch as a share of rollout.prompts_per_step (capped at 0.5)."""
    cooldown: int = 5
    """Steps a prompt waits after it was sampled before it can be replayed."""
    max_reuse: int = 5
    """Most replays of one prompt."""
    min_pass_rate: float = 0.24
    """Lowest pass rate (mean group reward / maximum reward, inclusive) that enters the queue."""
    max_pass_rate: float = 0.7
    """Highest pass rate (inclusive) that enters the queue; pass rate 0 never does."""
