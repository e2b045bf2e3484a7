"""DBB's settings (`sample_efficiency.dbb.*`): the section's dataclass, every key with its one-line
doc.

Registered as the config section `sample_efficiency.dbb` (`mmrlvr.config.sections.SECTIONS`,
whose plug-in module `mmrlvr.methods.sections` imports this file): the config builds, checks and
prints it without importing the method. Keep this file light (dataclasses only): loading a
config reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrlvr.config.sections import SECTIONS


@SECTIONS.register("sample_efficiency.dbb")
@dataclass
class DbbConfig:
    enabled: bool = False
    """Beta-Bernoulli advantages (our `dbb`, after arXiv 2603.18444): replace the group baseline by a
    per-prompt Beta posterior of the pass rate; all-equal groups then get non-zero advantages. The same
    as algo.advantage=dbb (the estimator's name; this section holds its settings either way): true
    replaces algo.advantage by dbb; refused with algo.overlong_buffer or algo.dynamic_sampling (dapo sets both)."""
    lam: float = 0.9
    """Decay of the posterior per visit: alpha <- lam * alpha + sum(r)."""
    eps: float = 1e-6
    """Added to sqrt(p (1 - p)) before dividing."""
    scale: str = "std"
    """std: (r - p) / (sqrt(p (1 - p)) + eps); none: r - p (Dr.GRPO-style)."""
    include_current: bool = True
    """Fold the current group into the posterior before computing p."""
