"""Token weighting's settings (`token_weighting.*`, kawhi's `kawhi_*` keys too: one section): the
section's dataclass, every key with its one-line doc.

Registered as the config section `token_weighting` (`mmrlvr.config.sections.SECTIONS`, whose
plug-in module `mmrlvr.methods.sections` imports this file): the config builds, checks and
prints it without importing the method. Keep this file light (dataclasses only): loading a
config reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmrlvr.config.sections import SECTIONS


@SECTIONS.register("token_weighting")
@dataclass
class TokenWeightingConfig:
    method: str = "none"
    """none, entropy_topk, vppo, pepo, tor or kawhi (mmrlvr.algos.token_weights, mmrlvr/methods/kawhi/):
    per-token advantage weights."""
    top_frac: float = 0.2
    """entropy_topk: share of the batch's tokens (highest entropy) that get gradient."""
    perception_frac: float = 0.2
    """Share of the batch's tokens labelled perception (highest visual dependency); also tor's."""
    reasoning_frac: float = 0.2
    """Share of the batch's tokens labelled reasoning (highest entropy); also tor's."""
    vppo_top_frac: float = 0.4
    """vppo: share of each response's tokens (highest visual dependency) that get gradient."""
    vppo_beta_min: float = 0.9
    """vppo: smallest sequence scale; the largest is set so that the scales average to 1."""
    pepo_variant: str = "released"
    """pepo: released (softmax over the raw cosine similarity, averaged over all hidden states at
    each token, as the authors' code: weights within a few percent of 1) or minmax (softmax over
    the min-max-normalised similarity of `similarity_layers`: weights up to 1.74x apart)."""
    pepo_gate: float = 0.05
    """pepo: strength of the entropy gate on the similarity logits."""
    pepo_temperature: float = 1.8
    """pepo: softmax temperature over a response's similarities."""
    tor_perception: float = 1.5
    """tor: raw weight of perception tokens (before renormalising to mean 1)."""
    tor_reasoning: float = 1.5
    """tor: raw weight of reasoning tokens."""
    tor_both: float = 2.0
    """tor: raw weight of tokens that are both."""
    tor_other: float = 0.5
    """tor: raw weight of the remaining tokens."""
    kawhi_split: str = "paragraph"
    """kawhi: where a reasoning step ends: paragraph (a blank line), line (a newline) or sentence (a
    newline, or whitespace after . ! ?)."""
    kawhi_layers: list[int] = field(default_factory=lambda: [-2, -1])
    """kawhi: decoder layers (negative counts from the end) whose attention gives the vision heads,
    the salient region and each token's attention to it (one eager-attention forward)."""
    kawhi_heads: int = 2
    """kawhi: vision heads kept per layer and response (highest attention mass on the image)."""
    kawhi_region_frac: float = 0.25
    """kawhi: share of a response's visual tokens (highest saliency) that form its salient region."""
    kawhi_align_weight: float = 0.5
    """kawhi: weight of alignment against decisiveness in the weighted harmonic mean (0: decisiveness only)."""
    kawhi_strength: float = 1.0
    """kawhi: step weight = (1 - strength) + strength * harmonic score, then mean 1 per response."""
    corrupt_prob: float = 0.5
    """visual_dependency: probability that each vision patch (14x14 for Qwen2-VL) is blacked out."""
    similarity_layers: list[int] = field(default_factory=lambda: [-1])
    """pepo (minmax variant): decoder layers (negative counts from the end) whose hidden states give
    the similarity, taken at the state predicting each token; the released variant ignores it."""
    diagnostics: bool = True
    """On logging steps also compute entropy and visual dependency (if the method does not) to log
    token-label fractions and write token_roles/step_N.jsonl."""
    roles_per_step: int = 4
    """Completions written to token_roles/step_N.jsonl per logging step."""
    share_forward: bool = True
    """Take the clean log-probs and entropies the signals need from the update's own forward instead
    of a separate no-grad forward, when the update is one forward (ppo_epochs, mini_batches and
    grad_accum all 1, no train.micro_batch_tokens) and the signals are entropy / visual_dependency (not pepo's hidden states):
    the same weights and update, one forward fewer (vppo, tor: the corrupted forward remains)."""
