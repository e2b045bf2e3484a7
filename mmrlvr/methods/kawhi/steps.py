"""KAWHI (Key-Region Aligned Weighted Harmonic Incentive, arXiv 2603.27375): credit moved within a
response, step by step, towards the reasoning steps that look at the image's salient region and
are decisive.

No code is public and the paper's method text was not available to us (only its abstract: "localizes
semantically salient regions through hierarchical geometric aggregation, identifies vision-critical
attention heads via structured attribution, and performs paragraph-level credit reallocation").
Every formula below is OUR READING, marked as such; docs/explanation/kawhi.md says which part is
the paper's and which is ours.

This module holds the steps: token texts -> step ids; (N, T) signals -> (N, T) weights with
token-mean 1 per response, 0 on padding (pure functions). Where the key region is and how much a
token attends it is `regions.py` beside it.
"""

from __future__ import annotations

import torch

SPLITS = ("paragraph", "line", "sentence")
_SENTENCE_END = ".!?"
_EPS = 1e-6  # floor of a relative score inside the harmonic mean (a zero score gives ~0, not inf)


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
