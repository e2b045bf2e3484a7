"""Config of the sample-efficiency methods: prompt replay, DBB advantages, demonstrations.

Kept apart from config.py so the section stays self-contained; `Config.sample_efficiency`
holds it. Each method is off by default and validated up front (mmrlvr/validate.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class DbbConfig:
    enabled: bool = False
    """Beta-Bernoulli advantages (our `dbb`, after arXiv 2603.18444): replace the group baseline by a
    per-prompt Beta posterior of the pass rate; all-equal groups then get non-zero advantages. Replaces
    algo.advantage; refused with algo.overlong_buffer or algo.dynamic_sampling (dapo sets both)."""
    lam: float = 0.9
    """Decay of the posterior per visit: alpha <- lam * alpha + sum(r)."""
    eps: float = 1e-6
    """Added to sqrt(p (1 - p)) before dividing."""
    scale: str = "std"
    """std: (r - p) / (sqrt(p (1 - p)) + eps); none: r - p (Dr.GRPO-style)."""
    include_current: bool = True
    """Fold the current group into the posterior before computing p."""


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


@dataclass
class SampleEfficiencyConfig:
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """Prompt replay."""
    dbb: DbbConfig = field(default_factory=DbbConfig)
    """Beta-Bernoulli (DBB) advantages."""
    demos: DemosConfig = field(default_factory=DemosConfig)
    """Demonstration bootstrapping."""


def max_reward(cfg) -> float:
    """The largest reward the verifiers can give a completion: the positive reward weights (1 with
    none). Replay's pass rate and DBB's posteriors divide the verifiers' rewards by it; a temporal-
    contrast bonus is not part of them (a prompt right 80% of the time reads 0.8, not 0.8 / 1.3)."""
    return sum(max(0.0, t.weight) for t in cfg.rewards) if cfg.rewards else 1.0
