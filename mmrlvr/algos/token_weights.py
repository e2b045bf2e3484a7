"""Per-token signals -> labels (perception / reasoning) and advantage weights, all `(N, T)`.

Pure tensor functions: they take detached signals and a mask and return weights that multiply
the per-token advantages before `policy_loss`. Padding always gets weight 0. Labelling tokens and
weighting them are separate functions, so each can be swapped; the weighting methods that use
labels (`tor`) call the same labelling functions whose fractions the step logs.

A method is registered by name with the signals it needs; `token_weighting.method` picks one. A
method with a folder of its own registers from there (`kawhi`: `mmrlvr/methods/kawhi/`): `METHODS`
names `mmrlvr.methods.builtin` as its plug-in package, so a reader that never imported the methods still
finds it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, Callable

import torch

from mmrlvr.registry import Registry

OTHER, PERCEPTION, REASONING, BOTH, PAD = 0, 1, 2, 3, -1
LABEL_NAMES = {OTHER: "other", PERCEPTION: "perception", REASONING: "reasoning", BOTH: "both"}


def _ceil(x: float) -> int:
    """ceil that ignores float noise: 0.2 * 15 is 3.0000000000000004, and should give 3."""
    return math.ceil(round(x, 9))


def visual_dependency(logprobs: torch.Tensor, corrupt_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """How much each token's probability depends on the media: (N, T) -> (N, T) in [0, 10].

    d = exp(delta) - delta - 1 with delta = clamp(logp_corrupt - logp, -20, 20) (the k3 estimator:
    0 when corrupting the media leaves the token's probability unchanged, growing either way),
    clamped to [0, 10]; 0 on padding.
    """
    delta = (corrupt_logprobs.detach().float() - logprobs.detach().float()).clamp(-20.0, 20.0)
    d = (torch.exp(delta) - delta - 1.0).clamp(0.0, 10.0)
    return torch.where(mask.bool(), d, torch.zeros_like(d))


def similarity_to_visual(hidden: torch.Tensor, visual: torch.Tensor, t: int, at_token: bool = False) -> torch.Tensor:
    """(n, L, H) hidden states, (n, L) visual-position mask -> (n, t) mean cosine similarity of the
    states of the t completion positions to the visual ones: with `at_token` the states at the
    completion tokens themselves (positions L-t .. L-1, as PEPO's released code), else the states
    predicting them (L-t-1 .. L-2, aligned with the tokens' log-probs).

    mean_v cos(h, h_v) = normalise(h) . mean_v normalise(h_v): O(n * L * H), no (L x L) matrix.
    """
    hn = torch.nn.functional.normalize(hidden.float(), dim=-1)
    vis = visual.float()
    v = (hn * vis[..., None]).sum(1) / vis.sum(1, keepdim=True).clamp(min=1)
    states = hn[:, hn.shape[1] - t :] if at_token else hn[:, -(t + 1) : -1]
    return (states * v[:, None]).sum(-1)


def attention_to_visual(attn: torch.Tensor, visual: torch.Tensor, t: int) -> torch.Tensor:
    """(n, heads, L, L) attention weights, (n, L) visual mask -> (n, t) attention mass that the
    states predicting the t completion tokens put on visual positions, averaged over heads."""
    a = attn.float()[:, :, -(t + 1) : -1]
    return (a * visual.float()[:, None, None, :]).sum(-1).mean(1)


def topk_mask(score: torch.Tensor, mask: torch.Tensor, top_frac: float, per_row: bool = False,
              exact: bool = False) -> torch.Tensor:
    """1.0 on the top `top_frac` valid tokens by score, 0 elsewhere.

    k = ceil(top_frac * n) with n the valid tokens of the batch (or of each row with `per_row`).
    `exact`: exactly k tokens, ties broken by position (the earlier token first; the batch in
    row-major order), as VPPO's rank mask (see `rank_topk`). Otherwise every token tied with the
    k-th score is kept (a quantile threshold, as the 80/20 rule's `entropy >= threshold`), so
    more than k tokens can be selected: with 8 of 10 scores exactly 0 and k = 4, all 10 are.
    """
    valid = mask.bool()
    score = score.detach().float()
    if per_row:
        rows = [topk_mask(score[i : i + 1], valid[i : i + 1], top_frac, exact=exact) for i in range(score.shape[0])]
        return torch.cat(rows) if rows else torch.zeros_like(score)
    n = int(valid.sum())
    k = min(_ceil(top_frac * n), n)
    if k <= 0:
        return torch.zeros_like(score)
    if exact:
        return rank_topk(score.flatten(), valid.flatten(), k).view_as(score)
    threshold = score[valid].topk(k).values[-1]
    return (valid & (score >= threshold)).float()


def rank_topk(score: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    """(L,) scores -> (L,) 1.0 on the k valid entries of highest score, ties to the earlier index.

    VPPO's released rule (huaixuheqing/VPPO-RL, verl/workers/actor/dp_actor.py lines 407-426 at
    a23c54b): padding set to -inf, scores sorted descending, the first k ranks kept
    (k = ceil(top_p * |o_i|)) and scattered back. Their `torch.sort` is not stable (the order of
    ties is the kernel's); ours is, so ties go to the earlier token, reproducibly.
    """
    keyed = torch.where(valid, score, torch.full_like(score, float("-inf")))
    order = torch.sort(keyed, descending=True, stable=True).indices
    out = torch.zeros_like(score)
    out[order[:k]] = 1.0
    return out * valid.float()


def entropy_topk(entropy: torch.Tensor, mask: torch.Tensor, top_frac: float = 0.2) -> torch.Tensor:
    """The 80/20 rule: weight 1 on the top `top_frac` of the batch's valid tokens by entropy, else 0."""
    return topk_mask(entropy, mask, top_frac)


def token_labels(
    entropy: torch.Tensor, dependency: torch.Tensor, mask: torch.Tensor,
    perception_frac: float = 0.2, reasoning_frac: float = 0.2,
) -> torch.Tensor:
    """(N, T) long labels: PERCEPTION (top fraction of the batch's tokens by visual dependency),
    REASONING (top fraction by entropy), BOTH, OTHER; PAD (-1) on padding.

    Each fraction selects exactly k = ceil(frac * n) tokens, ties broken by position: a confident
    token's dependency is exactly 0 (its log-prob is 0.0 in fp32 under both media), and keeping
    every tie would label all tokens perception whenever most dependencies are 0."""
    p = topk_mask(dependency, mask, perception_frac, exact=True).bool()
    r = topk_mask(entropy, mask, reasoning_frac, exact=True).bool()
    labels = torch.full(mask.shape, OTHER, dtype=torch.long, device=mask.device)
    labels[p] = PERCEPTION
    labels[r] = REASONING
    labels[p & r] = BOTH
    labels[~mask.bool()] = PAD
    return labels


def label_stats(labels: torch.Tensor, weights: torch.Tensor | None = None) -> dict[str, float]:
    """Share of valid tokens per label (`tokens/<label>_frac`) and mean weight per label."""
    valid = labels != PAD
    n = max(int(valid.sum()), 1)
    out = {}
    for code, name in LABEL_NAMES.items():
        sel = labels == code
        out[f"tokens/{name}_frac"] = int(sel.sum()) / n
        if weights is not None and bool(sel.any()):
            out[f"tokens/weight_{name}"] = float(weights[sel].float().mean())
    return out


# ---------------------------------------------------------------------------------------------
# weighting methods


RUN_PARAMS = ("progress",)
"""Parameters the step supplies (the run's progress through training), not settings."""


@dataclass(frozen=True)
class Method:
    fn: Callable[..., torch.Tensor]
    needs: tuple[str, ...]  # signals the method reads: entropy, visual_dependency, visual_similarity
    params: type  # its settings' record: a frozen dataclass of the fn's keyword parameters and defaults

    def settings(self, source) -> Any:
        """The method's record filled from `source` (the `token_weighting` config), field by field:
        a setting the config does not have is an error, never a silent fallback to the default."""
        missing = [f.name for f in fields(self.params) if not hasattr(source, f.name)]
        if missing:
            raise AttributeError(f"token weighting settings {missing} are not fields of {type(source).__name__}")
        return self.params(**{f.name: getattr(source, f.name) for f in fields(self.params)})


METHODS: Registry[Method] = Registry("token weighting method", plugins="mmrlvr.methods.builtin")  # kawhi registers from there


def _params_record(name: str, fn) -> type:
    """A frozen dataclass of `fn`'s settings: every parameter after (signals, mask) but the run's."""
    params = list(inspect.signature(fn).parameters.values())[2:]
    spec = [(p.name, p.annotation if p.annotation is not inspect.Parameter.empty else Any, field(default=p.default))
            for p in params if p.name not in RUN_PARAMS]
    return make_dataclass(f"{name.title().replace('_', '')}Settings", spec, frozen=True)


def register_method(name: str, needs: tuple[str, ...] = ()):
    """`@register_method("name", needs=("entropy",))` on `fn(signals, mask, **params) -> (N, T)`;
    each parameter after (signals, mask) is a `token_weighting.<name>` setting with its default
    (`progress` excepted: the step passes it), collected in the method's own record."""

    def deco(fn):
        METHODS.register(name)(Method(fn, tuple(needs), _params_record(name, fn)))
        return fn

    return deco


def token_weights(method: str, signals: dict[str, torch.Tensor], mask: torch.Tensor, settings=None,
                  **params) -> torch.Tensor:
    """Weights of method `method`: detached, (N, T), 0 on padding. `settings`: the method's record
    (`Method.settings(cfg.token_weighting)`); `params`: keyword settings instead (any method's:
    each method takes its own, and a name that is no method's setting is an error) and `progress`."""
    m = METHODS.get(method)
    missing = [s for s in m.needs if s not in signals]
    if missing:
        raise KeyError(f"token weighting {method!r} needs signals {missing}; got {sorted(signals)}")
    unknown = sorted(set(params) - set(RUN_PARAMS) - setting_names())
    if unknown:
        raise TypeError(f"{unknown}: no token weighting method has such a setting; known: {sorted(setting_names())}")
    own = {f.name for f in fields(m.params)}
    kw = {k: v for k, v in params.items() if k in own or (k in RUN_PARAMS and k in inspect.signature(m.fn).parameters)}
    if settings is not None:
        kw.update(dataclasses.asdict(settings))
    w = m.fn(signals, mask, **kw)
    return torch.where(mask.bool(), w.detach().float(), torch.zeros_like(w, dtype=torch.float))


def setting_names() -> set[str]:
    """Every method's setting names (the `token_weighting.*` keys the methods read)."""
    return {f.name for name in METHODS.names() for f in fields(METHODS.get(name).params)}


@register_method("none")
def _none(signals, mask) -> torch.Tensor:
    return mask.float()


@register_method("entropy_topk", needs=("entropy",))
def _entropy_topk(signals, mask, top_frac: float = 0.2) -> torch.Tensor:
    return entropy_topk(signals["entropy"], mask, top_frac)


def _row_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.float()
    return (x * m).sum(1) / m.sum(1).clamp(min=1)


@register_method("vppo", needs=("visual_dependency",))
def vppo(signals, mask, vppo_top_frac: float = 0.4, vppo_beta_min: float = 0.9) -> torch.Tensor:
    """VPPO: gradient only on exactly k = ceil(vppo_top_frac * |o_i|) tokens of each response, the
    highest by visual dependency, ties to the earlier token (`rank_topk`), and the sequence scaled
    by beta_i: its mean dependency min-max normalised over the batch's responses to
    [beta_min, beta_max], beta_max = beta_min + (1 - beta_min) / mean(normalised), so that beta
    averages to 1 over the responses.

    Released code: huaixuheqing/VPPO-RL, verl/workers/actor/dp_actor.py lines 398-426 (the
    per-response rank mask) and 266-296 (the mini-batch min/max of the mean dependency).
    Differences: beta is normalised over the rows we weigh (those with a non-zero advantage),
    not the optimiser mini-batch; their ties are ordered by an unstable sort."""
    dep = signals["visual_dependency"].float()
    has = mask.bool().any(1)
    seq = _row_mean(dep, mask)
    beta = torch.ones_like(seq)
    if bool(has.any()):
        lo, hi = seq[has].min(), seq[has].max()
        norm = (seq - lo) / (hi - lo) if float(hi - lo) > 0 else torch.zeros_like(seq)
        mean_norm = norm[has].mean()
        if float(mean_norm) > 0:
            beta = vppo_beta_min + (1.0 - vppo_beta_min) * norm / mean_norm
    return topk_mask(dep, mask, vppo_top_frac, per_row=True, exact=True) * beta[:, None]


def _minmax_rows(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    valid = mask.bool()
    big = torch.finfo(x.dtype).max
    lo = torch.where(valid, x, torch.full_like(x, big)).min(1, keepdim=True).values
    hi = torch.where(valid, x, torch.full_like(x, -big)).max(1, keepdim=True).values
    span = (hi - lo).clamp(min=1e-6)  # PEPO's eps (grpo_trainer.py line 265)
    return torch.where(valid, (x - lo) / span, torch.zeros_like(x))


PEPO_VARIANTS = ("released", "minmax")


@register_method("pepo", needs=("entropy", "visual_similarity"))
def pepo(signals, mask, progress: float = 1.0, pepo_gate: float = 0.05, pepo_temperature: float = 1.8,
         pepo_variant: str = "released") -> torch.Tensor:
    """PEPO: s (visual similarity) and h (entropy) min-max normalised per response; gate
    g = 1 + gate * tanh(s + h - mean(s + h)); w = |o| softmax(x g / temperature) over the
    response's valid tokens (mean 1 per response); applied as (1 - p) + p w, p the progress.

    `released` (xzxxntxdy/PEPO, src/pepo/train/grpo_trainer.py lines 259-282 at 2b1e788; the
    schedule lines 436-439): x = the raw similarity (mean cosine, averaged over all hidden states,
    embeddings included, at the token's own position: `signals.compute_signals` with
    `similarity_layers=None, similarity_at_token=True`). Raw cosines spread ~0.1 within a response,
    so the weights stay within a few percent of 1. `minmax`: x = the min-max-normalised s, which
    spreads the weights up to e^(1/1.8) = 1.74x; kept as an option because on the tiny models the
    released weights are indistinguishable from `none` (a stronger contrast to compare against),
    not because the paper does it. The gate and its temperature 1.8 are the released scripts'
    (scripts/train/train_pepo_geometry3k_qwen25vl_3b.sh lines 75-76)."""
    if pepo_variant not in PEPO_VARIANTS:
        raise ValueError(f"unknown pepo_variant {pepo_variant!r}; known: {', '.join(PEPO_VARIANTS)}")
    valid = mask.bool()
    raw = signals["visual_similarity"].float()
    s = _minmax_rows(raw, mask)
    h = _minmax_rows(signals["entropy"].float(), mask)
    sh = s + h
    g = 1.0 + pepo_gate * torch.tanh(sh - _row_mean(sh, mask)[:, None])
    x = raw if pepo_variant == "released" else s
    logits = torch.where(valid, x * g / pepo_temperature, torch.full_like(s, float("-inf")))
    soft = torch.nan_to_num(torch.softmax(logits, dim=1), nan=0.0)  # all-padding rows: 0
    w = soft * valid.sum(1, keepdim=True).float()
    p = float(min(max(progress, 0.0), 1.0))
    return (1.0 - p) + p * w


@register_method("tor", needs=("entropy", "visual_dependency"))
def tor(
    signals, mask, perception_frac: float = 0.2, reasoning_frac: float = 0.2,
    tor_perception: float = 1.5, tor_reasoning: float = 1.5, tor_both: float = 2.0, tor_other: float = 0.5,
) -> torch.Tensor:
    """ToR: perception and reasoning tokens (the labels of `token_labels`) up-weighted, the rest
    down-weighted by the given coefficients, renormalised to mean 1 over the batch's valid
    tokens. No token is masked out while the coefficients are positive."""
    labels = token_labels(signals["entropy"], signals["visual_dependency"], mask, perception_frac, reasoning_frac)
    coef = torch.tensor([tor_other, tor_perception, tor_reasoning, tor_both, 0.0], device=mask.device)
    raw = coef[labels]  # PAD = -1 indexes the trailing 0
    total = raw.sum()
    n = mask.bool().sum()
    return raw * (n / total) if float(total) > 0 else raw
