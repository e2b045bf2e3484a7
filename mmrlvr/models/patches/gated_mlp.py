"""The language model's gated MLP with its activation and product recomputed in the backward.

A gated MLP computes `down(act(gate(x)) * up(x))`. Run by autograd it keeps four (n, T, I)
tensors per layer for the backward, I being the intermediate size: `gate(x)` (for the
activation's gradient), `act(gate(x))` and `up(x)` (for the product's) and the product itself (for
`down`'s weight gradient). In the tiny model's 128-token chain-of-thought update that is 97 of the
301 MB the backward holds; in a 7B Qwen2.5-VL (I = 18,944, hidden 3,584) about two thirds of what
a layer keeps (by a count of its saved tensors: 4I against ~9H for attention and norms).

`recomputed_gated_mlps` swaps, for the length of a forward, each eligible MLP's forward for one
that keeps only `gate(x)` and `up(x)`: `_GatedDown` recomputes the activation and the product in
the backward (two elementwise ops per layer) and replays the backward of the product and of
`down` with the same aten calls autograd makes (`mm_mat1_backward` / `mm_mat2_backward` on the
row-major folded input, `MulBackward0`, `silu_backward` / `gelu_backward`). The log-probs and every
gradient are bit-identical to the unswapped forward (tests, in every family). This is the idea of
Liger-Kernel's SwiGLU (`LigerSiLUMulFunction`, which keeps gate and up and recomputes the
activation), taken one op further to `down`, so that the product is not kept either; in plain
torch because Liger's Triton kernels need a GPU.

Which MLPs (`why_not_recomputed`): the language model's `Qwen2MLP` (Qwen2-VL, Qwen2.5-VL,
LLaVA-OneVision), `Qwen3VLTextMLP`, `Gemma3MLP` and `LlamaMLP` (Idefics3 / SmolVLM), whose forward
is exactly the expression above, with `down` a plain `nn.Linear` without bias or hooks and the
activation SiLU or tanh-GELU. Everything else (vision towers, LoRA or quantised `down`,
accelerate hooks, sharded parameters, gradient checkpointing, autocast, no gradient) runs its own
forward unchanged.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from mmrlvr.models.family_spec import patched_classes
from mmrlvr.models.wrapping import base_model, params_sharded
from mmrlvr.models.patches.swaps import checkpointed, swap_allowed


def __getattr__(name: str):
    """`GATED_MLPS`: the MLP classes whose forward is
    `down_proj(act_fn(gate_proj(x)) * up_proj(x))` (transformers 5); the `gated_mlps` of every family record
    (`mmrlvr.models.family_spec`), read on each access."""
    if name == "GATED_MLPS":
        return patched_classes("gated_mlps")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def activation_kind(act) -> str | None:
    """"silu" or "gelu_tanh" when `act` computes exactly F.silu / F.gelu(approximate="tanh"), else None."""
    if "forward" in getattr(act, "__dict__", {}):  # a forward replaced on the instance (hub kernels, hooks)
        return None
    name = type(act).__name__
    if name in ("SiLU", "SiLUActivation") and type(act).forward.__module__ in ("torch.nn.modules.activation",
                                                                              "transformers.activations"):
        return "silu"
    inner = getattr(act, "act", None)
    if (name == "GELUTanh" and isinstance(inner, functools.partial) and inner.func is F.gelu
            and inner.keywords == {"approximate": "tanh"} and not inner.args):
        return "gelu_tanh"
    return None


def why_not_recomputed(mlp: torch.nn.Module) -> str | None:
    """Why this module runs its own forward, else None."""
    if type(mlp).__name__ not in patched_classes("gated_mlps"):
        return "not a gated MLP of a known family"
    if "forward" in mlp.__dict__ or mlp._forward_hooks or mlp._forward_pre_hooks:
        return "hooks on the MLP"
    down = getattr(mlp, "down_proj", None)
    if type(down) is not torch.nn.Linear:
        return "down_proj is not a plain Linear (an adapter or a quantised layer)"
    if down.bias is not None:
        return "down_proj has a bias"
    if down._forward_hooks or down._forward_pre_hooks or hasattr(down, "_hf_hook") or "forward" in down.__dict__:
        return "hooks on down_proj (its weight may live only inside its forward)"
    if activation_kind(getattr(mlp, "act_fn", None)) is None:
        return "the activation is not SiLU or tanh-GELU"
    return None


def _act(kind: str, x: torch.Tensor) -> torch.Tensor:
    return F.silu(x) if kind == "silu" else F.gelu(x, approximate="tanh")


def _act_backward(kind: str, grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if kind == "silu":
        return torch.ops.aten.silu_backward(grad, x)
    return torch.ops.aten.gelu_backward(grad, x, approximate="tanh")


class _GatedDown(torch.autograd.Function):
    """(gate (..., I), up (..., I), weight (H, I)) -> F.linear(act(gate) * up, weight), (..., H),
    keeping gate and up only."""

    @staticmethod
    def forward(ctx, gate, up, weight, kind):
        ctx.kind = kind
        ctx.save_for_backward(gate, up, weight)
        return F.linear(_act(kind, gate) * up, weight)

    @staticmethod
    def backward(ctx, grad):
        # each (n, T, I) temporary is dropped as soon as it is used: at most three live at once, as in
        # autograd's own backward of these ops
        gate, up, weight = ctx.saved_tensors
        a = _act(ctx.kind, gate)
        g2 = grad.reshape(-1, grad.shape[-1])  # (n*T, H): what linear's folded mm received
        grad_w = None
        if ctx.needs_input_grad[2]:  # mm_mat2_backward, column-major weight.t(): grad.t() @ input
            product = a * up
            grad_w = g2.t().mm(product.view(-1, product.shape[-1]))
            del product
        grad_product = g2.mm(weight).view(a.shape)  # mm_mat1_backward, row-major input: grad @ weight
        del g2
        grad_up = grad_product * a if ctx.needs_input_grad[1] else None  # MulBackward0: grad * other
        del a
        grad_gate = None
        if ctx.needs_input_grad[0]:
            grad_a = grad_product * up
            del grad_product
            grad_gate = _act_backward(ctx.kind, grad_a, gate)
        return grad_gate, grad_up, grad_w, None


def _recomputing_forward(mlp: torch.nn.Module, kind: str):
    def forward(x):
        return _GatedDown.apply(mlp.gate_proj(x), mlp.up_proj(x), mlp.down_proj.weight, kind)
    return forward


def eligible_mlps(model) -> list[torch.nn.Module]:
    """The modules `recomputed_gated_mlps` swaps in `model`."""
    inner = base_model(model)
    if params_sharded(inner):  # FSDP2 / ZeRO-3 gather inside the wrapped forwards
        return []
    if checkpointed(inner):
        # the layers are recomputed in the backward, after the swap is undone: a non-reentrant
        # checkpoint would find other tensors saved than in the forward (and keeping less buys nothing)
        return []
    return [m for m in inner.modules() if why_not_recomputed(m) is None]


@contextlib.contextmanager
def recomputed_gated_mlps(model, enabled: bool = True):
    """Within: each eligible gated MLP keeps two of its four (n, T, I) tensors for the backward.
    Nothing is swapped without gradients (no_grad forwards keep nothing anyway) or under autocast
    (the backward would run outside it). Yields the number of MLPs swapped."""
    on = swap_allowed(model, enabled)
    mlps = eligible_mlps(model) if on else []
    for m in mlps:
        m.forward = _recomputing_forward(m, activation_kind(m.act_fn))
    try:
        yield len(mlps)
    finally:
        for m in mlps:
            del m.forward
