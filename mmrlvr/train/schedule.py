"""The learning-rate schedule: a factor of the peak lr per RL step.

The factors are transformers' (`transformers.optimization`, the `constant_with_warmup`, `linear`
and `cosine` lambdas), written out here because importing that module imports
`transformers.trainer_utils`, which imports peft when it is installed: ~60 MB of resident memory
in every run, LoRA or not. The scheduler is the same `torch.optim.lr_scheduler.LambdaLR` over a
`functools.partial`, so its state dict and checkpoints are unchanged.
"""

from __future__ import annotations

import math
from functools import partial

from mmrlvr.config import LR_SCHEDULES as SCHEDULES


def lr_factor(step: int, *, name: str, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak lr at `step` (0-based): linear warm-up from 0 over `warmup_steps`,
    then constant, linear decay to 0 at `total_steps`, or half a cosine to 0 there."""
    if name not in SCHEDULES:  # before the warm-up: LambdaLR calls this at step 0 when it is built
        raise ValueError(f"train.lr_scheduler={name!r}: expected one of {', '.join(SCHEDULES)}")
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    if name == "constant":
        return 1.0
    span = float(max(1, total_steps - warmup_steps))
    if name == "linear":
        return max(0.0, float(total_steps - step) / span)
    progress = float(step - warmup_steps) / span
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))  # cosine, half a cycle: num_cycles=0.5


def make_scheduler(optimizer, train_cfg):
    """A LambdaLR stepped once per RL step (like verl), from `train.lr_scheduler`,
    `train.warmup_steps` and `train.steps` (an unknown name raises here, when it is built)."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, partial(lr_factor, name=train_cfg.lr_scheduler, warmup_steps=train_cfg.warmup_steps,
                                       total_steps=train_cfg.steps))
