"""When the learner's forward may swap a module's forward for one that keeps less for the backward
(`gated_mlp`, `rms_norm`, `attention_mask`): the conditions the three share."""

from __future__ import annotations

import torch

from mmrlvr.models.wrapping import base_model


def swap_allowed(model, enabled: bool) -> bool:
    """Enabled, with gradients (a no-grad forward keeps nothing anyway) and without autocast on the
    model's device (the backward would run outside it, on other dtypes)."""
    if not (enabled and torch.is_grad_enabled()):
        return False
    device = next(base_model(model).parameters()).device
    return not torch.is_autocast_enabled(device.type)


def checkpointed(model) -> bool:
    """Gradient checkpointing on in any layer: each layer is recomputed in the backward, after a swap
    is undone, and a non-reentrant checkpoint must find the tensors its forward saved."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in base_model(model).modules())
