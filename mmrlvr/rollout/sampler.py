"""One token per row drawn by inverse CDF: one uniform number per row instead of one per vocabulary entry.

Why not `torch.multinomial`: for one sample ATen draws an exponential for every vocabulary entry
and takes argmax(p / Exp(1)) (`aten/src/ATen/native/Distributions.cpp`, the one-sample fast path).
On CPU the random numbers are the cost: 0.69 ms for 64 rows of the tiny model's 606 entries and
42 ms for 16 rows of Qwen's 151,936, against 0.18 and 0.23 ms here (`benchmarks/speed/sampler.py`,
2-core VM, 2026-12-02). The tokens follow the same distribution but are other draws, so a run
at a fixed seed samples other tokens than `generate(do_sample=True)` would; `rollout.sampler=
multinomial` keeps transformers' own draw.

Exactness: the (float32) probabilities are summed per block of `BLOCK` entries (relative error
~1e-7, the precision of the probabilities themselves), the block is found on the float64 running
sum of those and the token on the chosen block's float64 cumulative sum, so no float32 prefix sum
over the vocabulary rounds small probabilities away. A zero-probability entry
(suppressed ids, top-k/top-p cuts) is never drawn: the draw u lies in (0, total] and an entry is
taken where the running sum first reaches u.

Rows in several `generate` calls (`rollout.generate_max_rows`): each step draws the uniforms of
every row of the rollout from one generator seeded per rollout and each call takes its own rows'
(`InverseCdfSampler(rows, total, seed)`), so a row's draws do not depend on which call it is in:
with one call this is the stream a global `torch.manual_seed(seed)` gives, bit for bit.
"""

from __future__ import annotations

import torch

BLOCK = 1024


def draw_inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None = None,
                     uniform: torch.Tensor | None = None) -> torch.Tensor:
    """(N, V) non-negative weights (rows need not sum to 1) -> (N,) long ids, one draw per row.

    uniform: (N, 1) float64 draws in [0, 1) to use, else drawn here from `generator`."""
    n, v = probs.shape
    probs = probs.contiguous()
    blk = min(BLOCK, v)
    full = v // blk
    mass = probs.as_strided((n, full, blk), (v, blk, 1)).sum(-1)  # (N, full): block sums, a view, no copy
    if full * blk < v:
        mass = torch.cat([mass, probs[:, full * blk:].sum(-1, keepdim=True)], dim=1)
    mass = mass.double()
    cum = mass.cumsum(-1)  # (N, nb)
    if uniform is None:
        uniform = torch.rand(n, 1, dtype=torch.float64, device=probs.device, generator=generator)
    u = (1.0 - uniform.to(probs.device, torch.float64)) * cum[:, -1:]
    b = torch.searchsorted(cum, u).clamp_(max=mass.shape[1] - 1)  # (N, 1): first block whose running sum reaches u
    prev = torch.where(b > 0, cum.gather(1, (b - 1).clamp(min=0)), torch.zeros_like(u))
    rest = u - prev  # > 0 (u > prev as doubles): how far into block b
    idx = b * blk + torch.arange(blk, device=probs.device)  # (N, blk): block b's entries (the last one may run past V)
    inside = idx < v
    within = (probs.gather(1, idx.clamp(max=v - 1)) * inside).double().cumsum(-1)
    j = torch.searchsorted(within, rest)
    last = (within < within[:, -1:]).sum(-1, keepdim=True)  # the block's last nonzero entry (rounding)
    return (b * blk + torch.minimum(j, last)).squeeze(1)


class InverseCdfSampler:
    """The last logits processor of a rollout: draws each row's token from softmax(scores) and
    returns the scores with that token at +inf, so `generate`'s greedy argmax takes it. The
    processors before it (suppression, temperature, top-k, top-p) are generate's own.

    seed (with rows, total): this call generates rows `rows` of a rollout of `total` rows; each
    step draws `total` uniforms from a generator seeded with `seed` on the scores' device and
    uses this call's slice. None: the global generator, `n` uniforms a step."""

    def __init__(self, rows: slice | None = None, total: int | None = None, seed: int | None = None):
        self.rows, self.total, self.seed = rows, total, seed
        self._gen: torch.Generator | None = None

    def _uniform(self, n: int, device) -> torch.Tensor | None:
        if self.seed is None:
            return None
        if self._gen is None:
            self._gen = torch.Generator(device=device).manual_seed(int(self.seed))
        total = self.total if self.total is not None else n
        u = torch.rand(total, 1, dtype=torch.float64, device=device, generator=self._gen)
        return u[self.rows] if self.rows is not None else u

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        tokens = draw_inverse_cdf(torch.softmax(scores.float(), dim=-1), uniform=self._uniform(scores.shape[0], scores.device))
        return scores.scatter_(1, tokens.unsqueeze(1), float("inf"))


def sampling_processors(sampling, rows: slice | None = None, total: int | None = None, seed: int | None = None) -> list:
    """The processors that make `generate(do_sample=False)` sample as `do_sample=True` would:
    transformers' temperature, top-k and top-p warpers, in its order, then the draw (rows,
    total, seed: `InverseCdfSampler`'s, for rollouts split over several calls)."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out = []
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k > 0:
        out.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(sampling.top_p))
    return [*out, InverseCdfSampler(rows, total, seed)]
