"""The conditions the learner-forward swaps share (`mmrlvr.models.patches.swaps`)."""

from __future__ import annotations

import torch

from mmrlvr.models.patches.swaps import checkpointed, swap_allowed


def assert_swaps_nothing_without_grad_autocast_or_the_setting(swap, model) -> None:
    """`swap(model, enabled=...)` (one of the learner-forward context managers) swaps no module
    under no_grad, under autocast, or when its setting is off."""
    with torch.no_grad(), swap(model) as n:
        assert n == 0
    with torch.autocast("cpu", dtype=torch.bfloat16), swap(model) as n:
        assert n == 0
    with swap(model, enabled=False) as n:
        assert n == 0


def _model():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2)))
    return model, model[1]


def test_checkpointing_is_read_from_any_layer_and_only_when_true():
    model, inner = _model()
    assert not checkpointed(model)
    inner.gradient_checkpointing = True  # one nested layer is enough
    assert checkpointed(model)
    # a truthy value that is not the flag (a function some code keeps under that name) does not count
    inner.gradient_checkpointing = torch.utils.checkpoint.checkpoint
    assert not checkpointed(model)
    inner.gradient_checkpointing = False
    assert not checkpointed(model)


def test_swaps_need_gradients_no_autocast_and_the_setting():
    model, _ = _model()
    assert swap_allowed(model, True)
    assert not swap_allowed(model, False)
    with torch.no_grad():
        assert not swap_allowed(model, True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not swap_allowed(model, True)
