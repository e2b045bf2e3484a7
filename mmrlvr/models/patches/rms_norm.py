"""RMSNorm in bf16 / fp16 keeping only its input for the backward, with the rest recomputed there.

The families' RMSNorm computes, in float32 whatever the model's dtype:
`weight * (x32 * rsqrt(mean(x32 ** 2) + eps)).to(dtype)` with `x32 = x.to(float32)`. Run by
autograd in a bf16 model it keeps, per call, the float32 copy `x32` (4 bytes an element, for the
square's and the product's gradients) and the normed bf16 tensor (2 bytes, for the weight's
gradient), besides the (n, T, 1) root: 6 bytes an element, twice per decoder layer, while the
bf16 activations around it take 2. `recomputed_rms_norms` swaps, for the length of a learner
forward, each eligible norm's forward for `_RMSNorm`, which keeps only `x` (2 bytes) and
recomputes the rest in the backward, replaying autograd's own formulas (tools/autograd's
derivatives.yaml: `mul`, `to`, `rsqrt`, `add`, `mean`, `pow`) with the same aten calls in the
same order, so the gradients are bit for bit those of the unswapped norm (tests, in every family
whose norm this is).

In float32 the norm is left alone (not swapped; a float32 input reaching a swapped norm is handed
to its own forward): there `x.to(float32)` is `x` itself, so `x` receives the
square's, the product's and the residual stream's gradients in one sum whose order the swap
would change (3 terms: not bit for bit), and nothing would be saved but the normed tensor.
"""

from __future__ import annotations

import contextlib

import torch

from mmrlvr.models.family_spec import patched_classes
from mmrlvr.models.wrapping import base_model, params_sharded
from mmrlvr.models.patches.swaps import checkpointed, swap_allowed


def __getattr__(name: str):
    """`RMS_NORMS`: the classes whose forward is exactly
    `weight * (x32 * rsqrt(x32.pow(2).mean(-1) + eps)).to(dtype)` (transformers 5); the `rms_norms` of every family record
    (`mmrlvr.models.family_spec`), read on each access."""
    if name == "RMS_NORMS":
        return patched_classes("rms_norms")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _normed(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x32, root, normed in x's dtype): the norm's forward up to the weight, op for op."""
    x32 = x.to(torch.float32)
    root = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return x32, root, (x32 * root).to(x.dtype)


class _RMSNorm(torch.autograd.Function):
    """out = weight * normed(x); saves x (and the weight) only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.eps = eps
        ctx.save_for_backward(x, weight)
        return weight * _normed(x, eps)[2]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        x32, root, normed = _normed(x, ctx.eps)
        grad_weight = (grad * normed).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_h = (grad * weight).to(torch.float32)  # mul, then to(dtype)'s backward
            del normed
            from_product = grad_h * root  # (x32 * root) -> x32
            grad_root = (grad_h * x32).sum_to_size(root.shape)  # -> root, summed over the hidden size
            del grad_h
            grad_mean = -0.5 * grad_root * root.pow(3)  # rsqrt, then `+ eps`: identity
            grad_square = grad_mean.expand(x32.shape) / x32.shape[-1]  # mean over the last dim
            from_square = grad_square * (2.0 * x32.pow(1.0))  # pow(2): exponent * x ** (exponent - 1)
            grad_x = (from_product + from_square).to(x.dtype)  # x32's two gradients, then to(float32)'s backward
        return grad_x, grad_weight, None


def why_not_recomputed(norm: torch.nn.Module) -> str | None:
    """Why this module runs its own forward, else None."""
    if type(norm).__name__ not in patched_classes("rms_norms"):
        return "not an RMSNorm of a known family"
    if "forward" in norm.__dict__:
        return "its forward is replaced (hub kernels, another swap)"
    if norm._forward_hooks or norm._forward_pre_hooks:
        return "hooks on the norm"
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 1:
        return "no plain 1-D weight"
    if weight.dtype == torch.float32:
        return "float32 weights (the norm's input is float32: nothing to save)"
    if not isinstance(getattr(norm, "variance_epsilon", None), float):
        return "no float variance_epsilon"
    return None


def eligible_norms(model) -> list[torch.nn.Module]:
    """The modules `recomputed_rms_norms` swaps in `model`."""
    inner = base_model(model)
    if params_sharded(inner):  # FSDP2 / ZeRO-3 gather the weight inside their wrapped forwards
        return []
    if checkpointed(inner):
        return []  # the layers are recomputed in the backward after the swap is undone
    return [m for m in inner.modules() if why_not_recomputed(m) is None]


def _recomputing_forward(norm):
    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dtype == torch.float32 or not hidden_states.is_floating_point():
            return type(norm).forward(norm, hidden_states)  # float32: see the module's docstring
        return _RMSNorm.apply(hidden_states, norm.weight, norm.variance_epsilon)
    return forward


@contextlib.contextmanager
def recomputed_rms_norms(model, enabled: bool = True):
    """Within: each eligible RMSNorm fed bf16 / fp16 keeps only its input for the backward. Nothing
    is swapped without gradients or under autocast. Yields the number of norms swapped."""
    on = swap_allowed(model, enabled)
    norms = eligible_norms(model) if on else []
    for m in norms:
        m.forward = _recomputing_forward(m)
    try:
        yield len(norms)
    finally:
        for m in norms:
            del m.forward
