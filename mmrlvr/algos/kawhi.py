"""KAWHI (Key-Region Aligned Weighted Harmonic Incentive, arXiv 2603.27375): credit moved within a
response, step by step, towards the reasoning steps that look at the image's salient region and
are decisive.

No code is public and the paper's method text was not available to us (only its abstract: "localizes
semantically salient regions through hierarchical geometric aggregation, identifies vision-critical
attention heads via structured attribution, and performs paragraph-level credit reallocation").
Every formula below is OUR READING, marked as such; docs/explanation/kawhi.md says which part is
the paper's and which is ours.

Pure functions: attention maps (n, heads, t, L) -> per-token region attention (n, t); token texts
-> step ids; (N, T) signals -> (N, T) weights with token-mean 1 per response, 0 on padding.
"""

from __future__ import annotations

import math

import torch

SPLITS = ("paragraph", "line", "sentence")
_SENTENCE_END = ".!?"
_EPS = 1e-6  # floor of a relative score inside the harmonic mean (a zero score gives ~0, not inf)


def _top(score: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    """(L,) -> (L,) 1.0 on the k valid entries of highest score, ties to the earlier index."""
    keyed = torch.where(valid, score, torch.full_like(score, float("-inf")))
    out = torch.zeros_like(score)
    out[torch.sort(keyed, descending=True, stable=True).indices[:k]] = 1.0
    return out * valid.float()


def vision_heads(attn: torch.Tensor, visual: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    """(n, heads, t, L) attention of the states predicting the t completion tokens, (n, L) visual
    mask, (n, t) valid mask -> (n, heads) bool: the k heads of each row whose mean (over valid
    tokens) attention mass on visual positions is highest; ties to the lower head index.

    OUR READING of "vision-critical attention heads via structured attribution": a head's
    attribution is the attention mass it puts on the image from the response, per layer, per row."""
    mass = (attn.float() * visual.float()[:, None, None, :]).sum(-1)  # (n, heads, t)
    v = valid.float()[:, None, :]
    per_head = (mass * v).sum(-1) / v.sum(-1).clamp(min=1)  # (n, heads)
    k = max(1, min(int(k), per_head.shape[1]))
    order = torch.sort(per_head, dim=1, descending=True, stable=True).indices[:, :k]
    return torch.zeros_like(per_head, dtype=torch.bool).scatter(1, order, True)


def head_map(attn: torch.Tensor, visual: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    """(n, heads, t, L) -> (n, t, L): attention to visual positions (0 elsewhere) averaged over the
    row's `vision_heads`; what one layer contributes to saliency and alignment."""
    sel = vision_heads(attn, visual, valid, k).float()  # (n, heads)
    a = attn.float() * visual.float()[:, None, None, :]
    return (a * sel[:, :, None, None]).sum(1) / sel.sum(1)[:, None, None]


def salient_region(maps: list[torch.Tensor], visual: torch.Tensor, valid: torch.Tensor, frac: float) -> torch.Tensor:
    """Per-layer maps (n, t, L) -> (n, L) 1.0 on each row's salient region: the top
    ceil(frac * |visual positions|) visual positions by saliency, ties to the earlier position.

    OUR READING of "hierarchical geometric aggregation": saliency aggregates tokens -> heads ->
    layers; per layer the mean over valid tokens of the selected heads' attention to a position,
    then the geometric mean over layers (a region must be attended in every selected layer)."""
    v = valid.float()[:, :, None]
    per_layer = [(m * v).sum(1) / v.sum(1).clamp(min=1) for m in maps]  # each (n, L)
    sal = torch.stack([torch.log(p + 1e-12) for p in per_layer]).mean(0)
    out = torch.zeros_like(sal)
    vis = visual.bool()
    for i in range(sal.shape[0]):
        n_vis = int(vis[i].sum())
        if n_vis:
            out[i] = _top(sal[i], vis[i], min(n_vis, math.ceil(round(frac * n_vis, 9))))
    return out


def region_attention(maps: list[torch.Tensor], visual: torch.Tensor, valid: torch.Tensor, frac: float) -> torch.Tensor:
    """(n, t) attention mass each completion token's predicting state puts on the salient region,
    through the selected heads, averaged over layers; 0 on padding. OUR READING of a token's
    alignment with the key region."""
    region = salient_region(maps, visual, valid, frac)
    per_layer = torch.stack([(m * region[:, None, :]).sum(-1) for m in maps])  # (layers, n, t)
    return per_layer.mean(0) * valid.float()


def _starts_step(split: str, newlines: int, space: bool, prev: str | None) -> bool:
    if split == "paragraph":
        return newlines >= 2
    if newlines >= 1:
        return True
    return split == "sentence" and space and prev is not None and prev in _SENTENCE_END


def segment_steps(texts: list[str], split: str = "paragraph") -> list[int]:
    """Token texts of one response -> the step index (0, 1, ...) of each token.

    A new step starts at the first non-space character after a break: `paragraph` a blank line
    (a whitespace run holding >= 2 newlines), `line` any newline, `sentence` a newline or
    whitespace after . ! or ?. A token belongs to the step of its first non-space character;
    a whitespace-only token to the step it ends. OUR READING of "paragraph-level"."""
    if split not in SPLITS:
        raise ValueError(f"unknown kawhi_split {split!r}; known: {', '.join(SPLITS)}")
    step, newlines, space, prev, out = 0, 0, False, None, []
    for text in texts:
        own = None
        for c in text:
            if c.isspace():
                newlines += c == "\n"
                space = True
                continue
            if prev is not None and _starts_step(split, newlines, space, prev):
                step += 1
            own = step if own is None else own
            newlines, space, prev = 0, False, c
        out.append(step if own is None else own)
    return out


def _relative_step_scores(x: torch.Tensor, steps: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(N, T) token scores -> (N, T): each token carries its step's mean score divided by the
    response's token mean (1 when that mean is 0: no information, no reallocation)."""
    x = x.float() * valid
    k = int(steps.max()) + 1 if steps.numel() else 1
    idx = steps.long().clamp(min=0)
    tot = torch.zeros(x.shape[0], k, dtype=torch.float, device=x.device).scatter_add(1, idx, x)
    cnt = torch.zeros_like(tot).scatter_add(1, idx, valid)
    step_mean = (tot / cnt.clamp(min=1)).gather(1, idx)
    row_mean = x.sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp(min=1)
    rel = step_mean / row_mean.clamp(min=1e-30)
    return torch.where(row_mean > 0, rel, torch.ones_like(rel))


def step_weights(align: torch.Tensor, decisive: torch.Tensor, steps: torch.Tensor, mask: torch.Tensor,
                 align_weight: float = 0.5, strength: float = 1.0) -> torch.Tensor:
    """(N, T) region attention, decisiveness, step ids and mask -> (N, T) weights, mean 1 over
    each response's valid tokens, 0 on padding.

    Per step k of a response: a_k, d_k = the step's mean alignment and decisiveness relative to
    the response's token means; H_k = 1 / (lam / a_k + (1 - lam) / d_k) (the weighted harmonic
    mean, lam = align_weight: high only when both are high); W_k = (1 - strength) + strength H_k;
    w_t = W_k(t) * |o| / sum_t W_k(t). OUR READING: the harmonic form is the paper's name, the
    relative scores, the strength mix and the per-response renormalisation are ours."""
    valid = mask.bool()
    v = valid.float()
    a = _relative_step_scores(align, steps, v).clamp(min=_EPS)
    d = _relative_step_scores(decisive, steps, v).clamp(min=_EPS)
    harmonic = 1.0 / (align_weight / a + (1.0 - align_weight) / d)
    raw = ((1.0 - strength) + strength * harmonic) * v
    total = raw.sum(1, keepdim=True)
    w = torch.where(total > 0, raw * v.sum(1, keepdim=True) / total.clamp(min=1e-30), v)
    return torch.where(valid, w, torch.zeros_like(w))
