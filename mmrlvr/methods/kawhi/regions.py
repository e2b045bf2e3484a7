"""KAWHI's key region: which attention heads look at the image, where its salient region is, and
how much each completion token's state attends it (the `region_attention` signal).

OUR READING of the paper's "localizes semantically salient regions through hierarchical geometric
aggregation, identifies vision-critical attention heads via structured attribution" (arXiv
2603.27375; no code public; docs/explanation/kawhi.md says which part is the paper's and which is
ours). Pure functions: attention maps (n, heads, t, L) -> per-token region attention (n, t).
"""

from __future__ import annotations

import math

import torch


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
