"""arrol's settings (`sample_efficiency.arrol.*`): the section's dataclass, every key with its one-
line doc.

Registered as the config section `sample_efficiency.arrol` (`mmrlvr.config.sections.SECTIONS`,
whose plug-in module `mmrlvr.methods.sections` imports this file): the config builds, checks and
prints it without importing the method. Keep this file light (dataclasses only): loading a
config reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrlvr.config.sections import SECTIONS


@SECTIONS.register("sample_efficiency.arrol")
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
