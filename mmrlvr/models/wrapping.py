"""The one place that knows how training wraps a model: DDP / DeepSpeed put it in `.module`,
peft in `get_base_model()`; FSDP2 / ZeRO-3 shard its parameters (DTensor / `ds_id`)."""

from __future__ import annotations


def unwrap(model):
    """The module inside a DDP wrapper or DeepSpeed engine (the model itself otherwise)."""
    return getattr(model, "module", model)


def base_model(model):
    """`unwrap`, then the transformers model under a peft adapter wrapper."""
    model = unwrap(model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def is_shard(p) -> bool:
    return type(p).__name__ == "DTensor" or hasattr(p, "ds_id")


def params_sharded(model) -> bool:
    """Any FSDP2 (DTensor) or ZeRO-3 (`ds_id`) parameter: each forward all-gathers across ranks."""
    return any(is_shard(p) for p in base_model(model).parameters())
