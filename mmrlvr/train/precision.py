"""Float32 master weights under a bf16 model: what the optimizer steps when the model computes in bf16.

AdamW's update at a learning rate of 1e-6 is below bf16's resolution for almost every weight (a
2048 x 2048 weight of std 0.02, 10 steps: 1.9% of the entries move in bf16, every one in float32),
so a bf16 run trains only when the optimizer updates float32 copies of the trainable weights, with
float32 moments, and the model's bf16 weights are rounded from them after each step. Every
launcher does that, and every forward computes in the model's dtype:

- one process and DDP: `MasterWeights` below, around torch's own AdamW (which steps the float32
  masters; the bf16 gradients are moved onto them after the backward, DDP's all-reduce done);
- FSDP2: accelerate's `mixed_precision` (float32 shards, `MixedPrecisionPolicy(param_dtype=bf16)`);
- DeepSpeed ZeRO: accelerate's `mixed_precision` (DeepSpeed's bf16 optimizer keeps the masters).

Autocast over float32 parameters (the other common recipe) is not used: the embedding's float32
output makes the residual stream and the KV cache float32 (measured on the tiny model), twice the
activation and generation memory of a bf16 forward, and the sampler, learner and reference would
not run the same bf16 arithmetic.

The training loop loads the trainable weights in float32 (`load_policy(..., master_weights=True)`:
a checkpoint's float32 masters load exactly) and frozen ones (reference model, frozen vision tower,
a LoRA base) in the model's dtype. float16 is refused for training (it needs loss scaling).
"""

from __future__ import annotations

import torch

from mmrlvr.models.load import _DTYPES as DTYPES, cast_frozen  # noqa: F401 - re-exported


def compute_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def low_precision(name: str) -> bool:
    """Does a model of dtype `name` train over float32 master weights?"""
    return DTYPES[name] != torch.float32


def accelerate_mixed_precision(name: str, sharded_engine: bool) -> str:
    """accelerate's `mixed_precision` for a model of dtype `name`: the sharding engines' own master
    weights (FSDP2, DeepSpeed) where the launch is one; "no" otherwise (`MasterWeights` then, and
    no autocast: the forward runs in the model's dtype as it is)."""
    if not sharded_engine or not low_precision(name):
        return "no"
    return {"bfloat16": "bf16", "float16": "fp16"}[name]


def sharded_engine_launch(env) -> bool:
    """Is this an FSDP or DeepSpeed launch (read from accelerate's launch variables, before the
    Accelerator exists)?"""
    return any(str(env.get(v, "false")).lower() == "true" for v in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"))


def engine_masters(accelerator) -> bool:
    """Does the launch's engine keep float32 masters itself (FSDP, DeepSpeed), with `mixed_precision` set?"""
    kind = str(accelerator.distributed_type).split(".")[-1]
    return kind in ("FSDP", "DEEPSPEED")


def training_problem(model_dtype: str) -> str | None:
    """Why a model of this dtype cannot be trained, else None (one line)."""
    if model_dtype == "float16":
        return ("model.dtype='float16': training in float16 needs loss scaling, which mmrlvr does not do; use "
                "bfloat16 (same range as float32, float32 master weights) or float32 (evaluating a float16 "
                "model with `mmrlvr eval` is fine)")
    return None


class MasterWeights:
    """The float32 masters of a model's trainable weights, the model itself in `dtype`.

    Built over a model whose trainable parameters are float32 (as the loop loads them): each such
    parameter's float32 tensor becomes its master and the parameter gets a `dtype` copy. After each
    backward (and DDP's all-reduce) `take_grads` adds the gradients onto the masters as float32;
    the optimizer (torch's AdamW over `params()`) steps the masters; `put_weights` rounds them back
    into the model. `release` ends it: the parameters hold their float32 masters again."""

    def __init__(self, model, dtype: torch.dtype):
        self.dtype = dtype
        self.pairs: list[tuple[str, torch.nn.Parameter, torch.Tensor]] = []  # (name, param in dtype, float32 master)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.requires_grad and p.dtype == torch.float32 and dtype != torch.float32:
                    master = p.detach()  # the float32 storage itself: no copy
                    p.data = master.to(dtype)
                    self.pairs.append((name, p, master))

    def __len__(self) -> int:
        return len(self.pairs)

    def params(self) -> list[torch.Tensor]:
        """What the optimizer steps: the masters of the parameters that still train."""
        return [m for _, p, m in self.pairs if p.requires_grad]

    def take_grads(self) -> None:
        """Each parameter's gradient added to its master's, as float32; the parameter's is freed.

        Called after every micro-batch's backward, so a mini-batch's gradient sums in float32 (as
        FSDP's float32 reduce dtype and DeepSpeed's bf16 optimizer sum it): summed in the bf16
        `.grad` over 32 micro-batches it would be rounded 32 times. The optimizer's `zero_grad`
        clears the masters' gradients between steps."""
        for _, p, m in self.pairs:
            if p.grad is not None:
                g = p.grad.to(torch.float32)
                m.grad = g if m.grad is None else m.grad.add_(g)
            p.grad = None

    @torch.no_grad()
    def put_weights(self) -> None:
        """The masters, rounded to the model's dtype, into the model (after each optimizer step)."""
        for _, p, m in self.pairs:
            p.data.copy_(m)

    def by_storage(self) -> dict[int, torch.Tensor]:
        """data_ptr of each parameter -> its master: replaces the model's tensors in a state dict
        (tied weights share one parameter, so they get one master)."""
        return {p.data_ptr(): m for _, p, m in self.pairs}

    def state_dict(self, model) -> dict[str, torch.Tensor]:
        """`model.state_dict()` with every trainable weight's master in place of its bf16 copy."""
        masters = self.by_storage()
        return {k: masters.get(v.data_ptr(), v) if v.is_floating_point() else v for k, v in model.state_dict().items()}

    @torch.no_grad()
    def release(self) -> None:
        """The parameters hold their float32 masters again (gradients dropped)."""
        for _, p, m in self.pairs:
            p.data = m
            p.grad = None
        self.pairs = []
