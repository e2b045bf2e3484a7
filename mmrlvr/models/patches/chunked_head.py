"""The output layer in blocks of positions, so a micro-batch's (N, T, V) completion logits never exist.

Why: at Qwen's 151,936-entry vocabulary the fp32 logits of 16 rows x 33 completion tokens are
321 MB, and the backward holds a gradient as large; with 1,024-token completions they are
gigabytes per micro-batch. Here the policy's forward runs with its output layer swapped for one
that keeps its input (the final hidden states, (N, T+1, H)) and returns an (N, T+1, 0) tensor;
the log-probs are then computed chunk_elements // V positions at a time, and the backward
recomputes each block's logits and adds its weight gradient into one buffer in place
(`_BlockedHead`). This is the idea of Liger-Kernel's fused linear cross-entropy (TRL's
`use_liger_loss`) in plain torch: one more matmul of the output layer in the backward, against
holding every logit and its gradient.

Where it does not apply (`why_not_chunked`): the output layer is not a plain `nn.Linear` (LoRA
or a quantised layer on it), the logits fit in one block anyway, the parameters
are sharded (FSDP / ZeRO-3 gather them only inside the wrapped forward), or the family changes
its logits after the output layer (Gemma 2's `final_logit_softcapping`, a `logit_scale`).
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch
import torch.nn.functional as F

from mmrlvr.models.wrapping import base_model, params_sharded


def output_layer(model) -> torch.nn.Module | None:
    head = base_model(model).get_output_embeddings()
    return head if isinstance(head, torch.nn.Module) and getattr(head, "weight", None) is not None else None


def vocab_size(head: torch.nn.Module) -> int:
    return int(getattr(head, "out_features", None) or head.weight.shape[0])


def why_not_chunked(model, positions: int, chunk_elements: int) -> str | None:
    """Why the completion logits of `positions` (N * T) positions are computed whole, else None."""
    inner = base_model(model)
    head = output_layer(inner)
    if type(head) is not torch.nn.Linear:
        return "the output layer is not a plain Linear (an adapter or a quantised layer on it)"
    if hasattr(head, "_hf_hook"):
        return "accelerate hooks on the output layer (offloaded weights live only inside its forward)"
    if positions * vocab_size(head) <= chunk_elements:
        return "the logits fit in one block"
    if params_sharded(inner):
        return "sharded parameters (gathered only inside the wrapped forward)"
    configs = (inner.config, inner.config.get_text_config())
    for key in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if any(getattr(c, key, None) not in (None, 1, 1.0) for c in configs):
            return f"the family rescales its logits after the output layer ({key})"
    return None


@contextlib.contextmanager
def kept_head_input(head: torch.nn.Module):
    """Within: `head(x)` keeps x in the yielded dict ("hidden") and returns an empty (..., 0)
    tensor, so the model's forward skips the vocabulary-wide matmul."""
    kept: dict = {"hidden": None}
    own = head.__dict__.get("forward")  # an instance-level forward (accelerate's hooks) is put back

    def keep(x, *args, **kwargs):
        kept["hidden"] = x
        return x.new_empty(*x.shape[:-1], 0)

    head.forward = keep
    try:
        yield kept
    finally:
        if own is None:
            del head.forward
        else:
            head.forward = own


MIN_BLOCK_POSITIONS = 16
"""Blocks never narrower: with a few rows the backward's (k, V) @ (V, H) becomes matrix-vector
products that add the vocabulary in one fp32 running sum (0.4% off at 151,936 entries for k <= 3,
~2e-5 from k = 8 on, measured)."""

_FLOOR = -1e30
"""Suppressed ids' tempered logit: exp underflows to exactly 0 as with -inf, and p * x stays 0 (no NaN,
as 0 * -inf would give); far from fp32's limit, so scaling it by an upstream gradient stays finite."""


def block_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float,
                 suppress: torch.Tensor | None) -> torch.Tensor:
    """(k, H) -> (k, V) fp32 tempered logits of one block (the only place a block's logits are made).
    The temperature divides the (k, H) input, not the (k, V) logits: one vocabulary-wide pass less."""
    if temperature != 1.0:
        hidden, bias = hidden / temperature, (bias / temperature if bias is not None else None)
    x = F.linear(hidden, weight, bias).float()
    return x.index_fill_(-1, suppress, _FLOOR) if suppress is not None else x


def _plogp_sum(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(k,) sum_v p x, overwriting p. A reduction, not a batched dot: CPU's bmm adds a 151,936-long
    row in one fp32 running sum (entropy off by 0.4% at Qwen's vocabulary)."""
    return p.mul_(x).sum(-1)


class _BlockedHead(torch.autograd.Function):
    """log-probs (and entropies) of (P, H) hidden states' targets through a Linear output layer, k
    positions at a time. The backward recomputes each block's logits and adds its weight gradient
    into one fp32 buffer in place (`addmm_`), so no (P, V) tensor and no per-block (V, H) gradient
    is ever allocated. With x = z / T, p = softmax(x), H = lse - sum p x:
    d lp / dx = onehot(target) - p and dH / dx = -p (x - sum p x); dx / dz = 1 / T."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, k, temperature, suppress, with_entropy, entropy_grad):
        lps, lses, ents = [], [], []
        for hb, tb in zip(hidden.split(k), targets.split(k)):
            x = block_logits(hb, weight, bias, temperature, suppress)
            lse = torch.logsumexp(x, dim=-1)
            lps.append(x.gather(-1, tb.unsqueeze(-1)).squeeze(-1) - lse)
            lses.append(lse)
            if with_entropy:
                ents.append(lse - _plogp_sum(x.sub(lse.unsqueeze(-1)).exp_(), x))
        lp, lse = torch.cat(lps), torch.cat(lses)
        ent = torch.cat(ents) if with_entropy else lse.new_zeros(0)
        ctx.save_for_backward(hidden, weight, bias, targets, lse, ent, suppress)
        ctx.k, ctx.temperature, ctx.entropy_grad = k, temperature, with_entropy and entropy_grad
        if not ctx.entropy_grad:
            ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        hidden, weight, bias, targets, lse, ent, suppress = ctx.saved_tensors
        k, temp = ctx.k, ctx.temperature
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        g_h = torch.empty_like(hidden) if need_h else None
        g_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        g_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b and bias is not None else None
        use_ent = ctx.entropy_grad and g_ent is not None
        for s in range(0, hidden.shape[0], k):
            hb, tb, lb = hidden[s:s + k], targets[s:s + k], lse[s:s + k]
            gl = g_lp[s:s + k].float().unsqueeze(-1) / temp  # (k, 1): dz = dx / T
            x = block_logits(hb, weight, bias, temp, suppress)
            p = x.sub(lb.unsqueeze(-1)).exp_()
            if use_ent:  # sum p x = lse - H; suppressed ids: p = 0
                ge = g_ent[s:s + k].float().unsqueeze(-1) / temp
                gz = p.mul_(x.sub_(lb.unsqueeze(-1) - ent[s:s + k].unsqueeze(-1)).mul_(-ge).sub_(gl))
            else:
                gz = p.mul_(-gl)
            gz.scatter_add_(-1, tb.unsqueeze(-1), gl)  # (k, V)
            if g_h is not None:
                g_h[s:s + k] = (gz.to(weight.dtype) @ weight).to(hidden.dtype)
            if g_w is not None:
                g_w.addmm_(gz.t(), hb.float())
            if g_b is not None:
                g_b += gz.sum(0)
        return (g_h, g_w.to(weight.dtype) if g_w is not None else None,
                g_b.to(bias.dtype) if g_b is not None else None, None, None, None, None, None, None)


def head_logprobs(
    head: torch.nn.Linear,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    suppress_ids: Sequence[int],
    with_entropy: bool,
    entropy_grad: bool,
    chunk_elements: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(N, T, H) hidden states -> (N, T) log-probs of `targets` (and entropies) under the sampling
    distribution (temperature, suppressed ids at -inf, as `logits_to_logprobs`), in blocks of
    chunk_elements // V positions (at least `MIN_BLOCK_POSITIONS`)."""
    n, t, h = hidden.shape
    k = max(MIN_BLOCK_POSITIONS, chunk_elements // vocab_size(head))
    suppress = torch.tensor(list(suppress_ids), dtype=torch.long, device=hidden.device) if len(suppress_ids) else None
    lp, ent = _BlockedHead.apply(hidden.reshape(n * t, h), head.weight, head.bias, targets.reshape(n * t).to(hidden.device),
                                 k, float(temperature), suppress, with_entropy, entropy_grad)
    return lp.view(n, t), (ent.view(n, t) if with_entropy else None)
