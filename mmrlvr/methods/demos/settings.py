"""Demonstration bootstrapping's settings (`sample_efficiency.demos.*`): the section's dataclass,
every key with its one-line doc.

Registered as the config section `sample_efficiency.demos` (`mmrlvr.config.sections.SECTIONS`,
whose plug-in module `mmrlvr.methods.sections` imports this file): the config builds, checks and
prints it without importing the method. Keep this file light (dataclasses only): loading a
config reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrlvr.config.sections import SECTIONS


@SECTIONS.register("sample_efficiency.demos")
@dataclass
class DemosConfig:
    enabled: bool = False
    """Demonstration bootstrapping (CBRL, arXiv 2603.18953): with probability p_t a prompt's whole
    group sees k solved training examples as earlier chat turns; evaluation never does (held-out
    accuracy is measured without demos)."""
    p0: float = 0.5
    """Probability at step 0; p_t = p0 * max(0, 1 - t / anneal_steps)."""
    anneal_steps: int | None = None
    """Step at which p_t reaches 0 (None: train.steps)."""
    k: int = 2
    """Demonstrations per prompt (same task, never the prompt itself)."""
