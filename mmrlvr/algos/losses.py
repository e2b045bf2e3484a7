"""Policy-gradient losses on `(N, T)` token tensors.

They take tensors and scalars, never a config object, and return `(loss, stats)` where stats are
detached tensors (no `.item()`, so no device sync inside the loss).

The policy losses are registered in `POLICY_LOSSES` by their `algo.importance_level` name;
`policy_loss` looks one up. A new loss is one registered function
`fn(logprobs, old_logprobs, advantages, mask, **options) -> (loss, stats)` (the options are
`policy_loss`'s keywords); validation reads the registry's names, so nothing else lists them.
"""

from __future__ import annotations

import math

import torch

from mmrlvr.registry import Registry

POLICY_LOSSES: Registry = Registry("policy loss")

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    aggregation: str = "token-mean",
    norm_length: float | None = None,
    denominator: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce `(N, T)` per-token values to a scalar.

    token-mean: sum over valid tokens / their count. seq-mean-token-mean: mean over sequences
    (with at least one valid token) of each one's token mean. seq-mean-token-sum-norm: mean over
    sequences of token sum / norm_length (Dr. GRPO; norm_length defaults to T).
    `denominator` replaces the batch's own token (or sequence) count, so that micro-batches of one
    optimizer step sum to the loss of the whole batch.
    """
    mask = mask.to(values.dtype)
    masked = values * mask
    if aggregation == "token-mean":
        denom = mask.sum().clamp(min=1) if denominator is None else denominator
        return masked.sum() / denom
    has_tokens = (mask.sum(dim=1) > 0).to(values.dtype)
    n_seq = has_tokens.sum().clamp(min=1) if denominator is None else denominator
    if aggregation == "seq-mean-token-mean":
        per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return (per_seq * has_tokens).sum() / n_seq
    if aggregation == "seq-mean-token-sum-norm":
        length = float(norm_length if norm_length is not None else mask.shape[1])
        return (masked.sum(dim=1) / length * has_tokens).sum() / n_seq
    raise ValueError(f"unknown aggregation {aggregation!r}; known: {', '.join(AGGREGATIONS)}")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    importance_level: str = "token",
    aggregation: str = "token-mean",
    norm_length: float | None = None,
    denominator: float | torch.Tensor | None = None,
    correction: torch.Tensor | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with asymmetric clipping (DAPO clip-higher when clip_high > clip_low).

    logprobs, old_logprobs, mask: (N, T); advantages: (N, T) or (N, 1).
    loss_t = max(-A r_t, -A clip(r_t, 1 - clip_low, 1 + clip_high)), then aggregated.
    `dual_clip` c > 1 (dual-clip PPO, verl's `clip_ratio_c`): where A < 0, loss_t = min(loss_t, -A c),
    as verl's `compute_policy_loss_vanilla` does; None or 0: off.
    `correction` (N, T), detached: rollout-correction weights multiplying loss_t (None: 1).
    """
    if importance_level not in POLICY_LOSSES:
        raise ValueError(f"unknown importance_level {importance_level!r}; known: {', '.join(POLICY_LOSSES.names())}")
    return POLICY_LOSSES.get(importance_level)(
        logprobs, old_logprobs, advantages, mask, clip_low=clip_low, clip_high=clip_high, aggregation=aggregation,
        norm_length=norm_length, denominator=denominator, correction=correction, dual_clip=dual_clip)


@POLICY_LOSSES.register("token")
def ppo_token(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              **options) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO: each token has its own importance ratio r_t = exp(logprobs_t - old_logprobs_t)."""
    return clipped_surrogate(logprobs - old_logprobs, logprobs, advantages, mask, **options)


@POLICY_LOSSES.register("sequence")
def gspo(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
         **options) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO: the sequence ratio exp(mean_t log r_t) is shared by all tokens; written in the
    "GSPO-token" form so that per-token advantages still apply and gradients match."""
    log_ratio = logprobs - old_logprobs
    m = mask.to(log_ratio.dtype)
    seq = (log_ratio * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1)
    seq = seq.clamp(max=10.0)
    return clipped_surrogate(seq.detach() + logprobs - logprobs.detach(), logprobs, advantages, mask, **options)


def clipped_surrogate(
    log_ratio: torch.Tensor,
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: str = "token-mean",
    norm_length: float | None = None,
    denominator: float | torch.Tensor | None = None,
    correction: torch.Tensor | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped surrogate of `policy_loss` for a given per-token log importance ratio (N, T)."""
    mask_f = mask.to(logprobs.dtype)
    ratio = torch.exp(log_ratio.clamp(-20.0, 20.0))
    adv = advantages.expand_as(logprobs)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    lower_clipped = None
    if dual_clip:
        bound = -adv * dual_clip
        lower_clipped = (adv < 0) & (per_token > bound)
        per_token = torch.where(adv < 0, torch.minimum(per_token, bound), per_token)
    if correction is not None:
        per_token = per_token * correction.to(per_token.dtype)
    loss = aggregate(per_token, mask_f, aggregation, norm_length, denominator)
    with torch.no_grad():
        r = ratio.detach()
        high = ((r > 1.0 + clip_high) & (adv > 0)).to(mask_f.dtype)
        low = ((r < 1.0 - clip_low) & (adv < 0)).to(mask_f.dtype)
        lr = log_ratio.detach()
        stats = {
            "clip_frac_low": masked_mean(low, mask_f),
            "clip_frac_high": masked_mean(high, mask_f),
            "clip_frac": masked_mean(low + high, mask_f),
            # k3 estimate of KL(old || new): E_old[r - 1 - log r] >= 0
            "approx_kl": masked_mean(torch.expm1(lr.clamp(-20, 20)) - lr, mask_f),
            "ratio_mean": masked_mean(r, mask_f),
        }
        if lower_clipped is not None:
            stats["clip_frac_dual"] = masked_mean(lower_clipped.to(mask_f.dtype), mask_f)
    return loss, stats


KL_KINDS = ("k1", "k2", "k3")
LOSS_KL_KINDS = ("k2", "k3")
"""Estimators that regularise when differentiated as a loss term (see `kl_penalty`)."""


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL estimates from the sampled tokens' log-probs, (N, T) -> (N, T).

    With d = logp - ref on a token x ~ pi (Schulman's estimators):
      k1 = d                         E_pi[k1] = KL(pi || ref), but E_pi[grad k1] = E_pi[grad logp] = 0:
                                     as a loss it regularises nothing (use it in the reward);
      k2 = d^2 / 2                   E_pi[grad k2] = E_pi[d grad logp] = grad KL(pi || ref) (reverse KL);
      k3 = exp(-d) + d - 1           E_pi[k3] = KL(pi || ref), but E_pi[grad k3] = E_pi[(1 - ref/pi) grad logp]
                                     = -sum_x ref(x) grad logp(x) = grad KL(ref || pi): the forward KL's
                                     gradient (GRPO's, TRL's and verl's "low_var_kl" loss term).
    Per token these are conditional on the sampled prefix. The log-ratio of k3 is clamped to
    [-20, 20] and the result to [-10, 10] so one rare token cannot explode it.
    """
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.pow(2)
    if kind == "k3":
        neg = (-diff).clamp(-20.0, 20.0)
        return (torch.exp(neg) - neg - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL kind {kind!r}; known: {', '.join(KL_KINDS)}")


ROLLOUT_CORRECTIONS = ("none", "token_tis", "token_mis", "seq_tis", "seq_mis", "token_rs", "seq_rs")
"""How the policy loss corrects for the sampler not being the learner (vLLM's bf16 kernels,
another attention, other reductions): importance weights r = pi_old / pi_sampler per token or per
sequence, truncated at the cap (tis), kept within it and 0 beyond (mis: TRL's token_mask and
sequence_mask, verl's Token-MIS/Seq-MIS), or only the 0/1 filter without the ratio (rs: verl's
rejection sampling, `rollout_rs`)."""


def sampler_log_ratio(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, T) log(pi_old / pi_sampler) on valid tokens, exactly 0 elsewhere.

    Selected with `where`, not multiplied by the mask: a non-finite sampler log-prob on padding
    would otherwise survive as NaN x 0 = NaN. A non-finite difference on a valid token (a sampler
    that returned no score for it) also reads 0, i.e. ratio 1, no correction, as TRL does."""
    d = old_logprobs.float() - sampler_logprobs.float()
    return torch.where(mask.bool() & torch.isfinite(d), d, torch.zeros_like(d))


@torch.no_grad()
def rollout_correction_weights(
    old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> torch.Tensor:
    """(N, T) detached float weights that multiply the per-token policy loss; 0 on padding.

    old_logprobs: the learner's log-probs of the sampled tokens before the update (pi_old);
    sampler_logprobs: what the sampler drew them with; mask: (N, T) 1 on valid tokens.
    r_t = exp(old_t - sampler_t) per token; for seq_* modes r = exp(sum_t (old_t - sampler_t)) on
    every valid token of the sequence:
      *_tis: min(r, cap);   *_mis: r where r <= cap, else 0 (TRL's masked_fill(r > cap, 0));
      *_rs:  1 where r <= cap, else 0 (the filter alone);   none: the mask.
    """
    m = mask.to(old_logprobs.dtype)
    if mode == "none":
        return m.clone()
    log_r = sampler_log_ratio(old_logprobs, sampler_logprobs, mask).to(m.dtype)  # padding contributes log 1
    if mode.startswith("seq_"):
        log_r = log_r.sum(dim=1, keepdim=True).expand_as(m)
    elif not mode.startswith("token_"):
        raise ValueError(f"unknown rollout correction {mode!r}; known: {', '.join(ROLLOUT_CORRECTIONS)}")
    ratio = torch.exp(log_r.clamp(max=80.0))  # exp(80) ~ 5e34: far above any cap, still finite in fp32
    if mode.endswith("_tis"):
        return ratio.clamp(max=cap) * m
    if mode.endswith("_mis"):
        return torch.where(ratio <= cap, ratio, torch.zeros_like(ratio)) * m
    if mode.endswith("_rs"):
        return (ratio <= cap).to(m.dtype) * m
    raise ValueError(f"unknown rollout correction {mode!r}; known: {', '.join(ROLLOUT_CORRECTIONS)}")


@torch.no_grad()
def rollout_correction_stats(
    old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
    mode: str, cap: float,
) -> dict[str, torch.Tensor]:
    """Per-token means over valid tokens of how far sampler and learner drift (sampler -> learner):
    kl_k1 = E_sampler[log sampler - log old], kl_k3 = E_sampler[r - 1 - log r] with r = old / sampler,
    the mean weight, the fraction of tokens whose ratio exceeded the cap, and both mean negative
    log-likelihoods (exp of them are the perplexities)."""
    m = mask.to(old_logprobs.dtype)
    d = sampler_log_ratio(old_logprobs, sampler_logprobs, mask).to(m.dtype)
    log_r = d.sum(dim=1, keepdim=True).expand_as(m) if mode.startswith("seq_") else d
    return {
        "kl_k1": masked_mean(-d, m),
        "kl_k3": masked_mean(torch.expm1(d.clamp(-20, 20)) - d, m),
        "weight_mean": masked_mean(weights, m),
        "capped_frac": masked_mean((log_r > math.log(cap)).to(m.dtype), m),
        "nll_learner": masked_mean(-old_logprobs, m),
        "nll_sampler": masked_mean(-torch.where(mask.bool() & torch.isfinite(sampler_logprobs), sampler_logprobs,
                                                torch.zeros_like(sampler_logprobs)).to(m.dtype), m),
    }
