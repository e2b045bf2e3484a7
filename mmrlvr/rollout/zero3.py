"""DeepSpeed ZeRO-3's partitioned parameters, as the weight sync reads them.

Under ZeRO-3 each parameter (`ds_id`) holds an empty placeholder outside a gather; its whole shape
is `ds_shape`. `deepspeed.zero.GatheredParameters` all-gathers a list of them for the duration of a
`with` (every rank must enter it, in the same order: a collective) and partitions them again on
exit. The sync therefore hands the channel the Parameter objects themselves and gathers one
bucket's worth at a time (`weight_channel.send`), as FSDP2's DTensors are; deepspeed is imported
only when a partitioned parameter is met, so nothing here needs it installed.
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Sequence


def partitioned(t) -> bool:
    """A ZeRO-3 parameter (its data a placeholder outside a gather)."""
    return hasattr(t, "ds_id")


def full_shape(t) -> list[int]:
    """The whole tensor's shape: `ds_shape` for a ZeRO-3 parameter (its `shape` is the placeholder's)."""
    return list(t.ds_shape if partitioned(t) else t.shape)


def gathered(tensors: Iterable) -> contextlib.AbstractContextManager:
    """A context in which every ZeRO-3 parameter among `tensors` holds its whole data (read-only:
    nothing is broadcast back); released on exit. A no-op (no import) when none is partitioned."""
    params = _unique([t for t in tensors if partitioned(t)])
    if not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def gathered_copy(t):
    """`t` whole and detached: a ZeRO-3 parameter is gathered alone, copied, and released (every rank
    calls this for the same tensors in the same order)."""
    if not partitioned(t):
        return t.detach()
    with gathered([t]):
        return t.detach().clone()


def _unique(params: Sequence) -> list:
    """One entry per parameter (tied weights appear under two names; gathered once)."""
    seen: dict[int, object] = {}
    for p in params:
        seen.setdefault(id(p), p)
    return list(seen.values())
