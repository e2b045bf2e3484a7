"""Temporal contrast's settings (`temporal_contrast.*`): the section's dataclass, every key with
its one-line doc.

Registered as the config section `temporal_contrast` (`mmrlvr.config.sections.SECTIONS`, whose
plug-in module `mmrlvr.methods.sections` imports this file): the config builds, checks and
prints it without importing the method. Keep this file light (dataclasses only): loading a
config reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrlvr.config.sections import SECTIONS


@SECTIONS.register("temporal_contrast")
@dataclass
class TemporalContrastConfig:
    enabled: bool = False
    """Also sample each video prompt on its frames shuffled (scored, not trained on) and give
    correct ordered answers a bonus when ordered accuracy beats shuffled accuracy. Pair it with an
    advantage without std division (`algo.advantage: dr_grpo`): grpo's std cancels a bonus on every
    correct answer of a binary verifier exactly."""
    method: str = "tgrpo"
    """tgrpo (bonus alpha when p > mu * p_shuffled, per prompt) or tgpo (alpha scaled by the accuracy gap,
    normalised by the batch's largest gap); formulas in mmrlvr/methods/temporal_contrast/maths.py."""
    alpha: float = 0.3
    """Bonus added to the reward of a correct ordered completion."""
    mu: float = 1.0
    """Ordered accuracy must exceed mu times shuffled accuracy (strictly)."""
    shuffled_samples: int | None = None
    """Completions sampled per prompt on shuffled frames (None: group_size // 2)."""
    correct_threshold: float = 0.1
    """A completion counts as correct when its answer score exceeds this (strictly; Video-R1's
    `> 0.1`), so partial credit (tiou, iou, order) counts. In [0, 1)."""
