"""Config of the sample-efficiency methods: prompt replay, DBB advantages, demonstrations, arrol.

Kept apart from schema.py so the section stays self-contained; `Config.sample_efficiency`
holds it. Each method is off by default and validated up front (mmrlvr/checks/validate.py).
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
class ArrolConfig:
    enabled: bool = False
    """Online rollout pruning (arrol, arXiv 2603.24840): generate over_generation x rollout.group_size
    rows per prompt to prefix_tokens, score each partial row with a quality head on the policy's final
    hidden state (from the same generation pass), keep rollout.group_size rows per prompt chosen toward
    target_pos_share positives, finish and train on those only (docs/explanation/arrol.md)."""
    over_generation: float = 2.0
    """Rows generated per prompt = ceil(over_generation x rollout.group_size) (>= 1; 1: nothing pruned)."""
    prefix_tokens: int = 4
    """Tokens every row is generated to before the keep-or-drop decision (< rollout.max_new_tokens)."""
    target_pos_share: float = 0.5
    """Share of a group's survivors picked among the likeliest to succeed (the rest: the least likely)."""
    positive_at: float = 0.5
    """A finished row is a positive (label 1) when its verifier reward / the largest reward is >= this."""
    head_lr: float = 1.0e-2
    """AdamW learning rate of the quality head (constant)."""
    head_weight_decay: float = 0.0
    """AdamW weight decay of the quality head."""
    head_steps: int = 4
    """Full-batch AdamW steps on each round's survivors (their prefix hidden states and labels)."""
    min_auroc: float = 0.6
    """The head selects only while its AUROC on the last auroc_window out-of-sample survivors is >= this;
    below it (or with one class only, or fewer than min_labels), the first group_size rows of each group
    survive (the fallback: a random subset, as the rows are exchangeable)."""
    auroc_window: int = 256
    """Out-of-sample (score, label) pairs the trust AUROC is computed over (the newest)."""
    min_labels: int = 16
    """Labels the window must hold before the head is trusted."""
    eval_weighting: str = "none"
    """`mmrlvr eval --samples K`: none, or head (also report head_best@K, the candidate the quality head
    scores highest, and head_vote@K, answers voted with the head's scores as weights; the checkpoint must
    be a checkpoints/step_N directory, whose state.json holds the head)."""


@dataclass
class SampleEfficiencyConfig:
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """Prompt replay."""
    dbb: DbbConfig = field(default_factory=DbbConfig)
    """Beta-Bernoulli (DBB) advantages: the settings of the estimator algo.advantage=dbb."""
    demos: DemosConfig = field(default_factory=DemosConfig)
    """Demonstration bootstrapping."""
    arrol: ArrolConfig = field(default_factory=ArrolConfig)
    """Online rollout pruning with a learned quality head."""


def max_reward(cfg) -> float:
    """The largest reward the verifiers can give a completion: the positive reward weights (1 with
    none). Replay's pass rate and DBB's posteriors divide the verifiers' rewards by it; a temporal-
    contrast bonus is not part of them (a prompt right 80% of the time reads 0.8, not 0.8 / 1.3)."""
    return sum(max(0.0, t.weight) for t in cfg.rewards) if cfg.rewards else 1.0


def uses_dbb(cfg) -> bool:
    """DBB computes the advantages: `sample_efficiency.dbb.enabled` or `algo.advantage: dbb` (one
    answer for the user's config and the resolved one, where both say so; no preset names dbb)."""
    return bool(cfg.sample_efficiency.dbb.enabled) or cfg.algo.advantage == "dbb"


def dbb_switch(cfg) -> str | None:
    """How the config turns DBB on, for its error lines: "sample_efficiency.dbb" (the enabled
    switch, named first), "algo.advantage=dbb", or None when DBB is off."""
    if not uses_dbb(cfg):
        return None
    return "sample_efficiency.dbb" if cfg.sample_efficiency.dbb.enabled else "algo.advantage=dbb"


def dbb_named(saved: dict) -> dict:
    """A config saved before algo.advantage could name dbb: with `sample_efficiency.dbb.enabled: true`
    it trained with dbb whatever its algo.advantage said, which the resolved config now writes out."""
    algo, se = saved.get("algo"), saved.get("sample_efficiency")
    dbb = se.get("dbb") if isinstance(se, dict) else None
    if isinstance(algo, dict) and isinstance(dbb, dict) and dbb.get("enabled") is True:
        return {**saved, "algo": {**algo, "advantage": "dbb"}}
    return saved
