"""Engine and policy-loss names live in their registries alone: validation, its messages and the
engine factory read them there, so a new engine or loss is named in one place."""

from types import SimpleNamespace

import torch

from mmrlvr.algos.losses import POLICY_LOSSES
from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors
from mmrlvr.rollout.factory import ENGINE_BUILDERS, make_engine


def _lines(override: str, key: str) -> list[str]:
    return [line for line in config_errors(load_config(None, [override])) if line.startswith(key)]


def test_a_registered_engine_is_accepted_and_built_with_no_other_list_touched():
    made = object()
    ENGINE_BUILDERS.register("test_echo")(lambda cfg, policy, processor: (made, policy, processor))
    try:
        accepted = _lines("rollout.engine=test_echo", "rollout.engine=")
        cfg = SimpleNamespace(rollout=SimpleNamespace(engine="test_echo"))
        built = make_engine(cfg, "policy", "processor")
    finally:
        ENGINE_BUILDERS._items.pop("test_echo")
    assert accepted == [] and built == (made, "policy", "processor")
    assert _lines("rollout.engine=test_echo", "rollout.engine=") == [
        "rollout.engine='test_echo': expected hf, vllm or vllm_server"]


def test_a_registered_policy_loss_is_accepted_by_validation():
    POLICY_LOSSES.register("test_plain")(lambda lp, old, adv, mask, **options: (torch.zeros(()), {}))
    try:
        accepted = _lines("algo.importance_level=test_plain", "algo.importance_level")
    finally:
        POLICY_LOSSES._items.pop("test_plain")
    assert accepted == []
    assert _lines("algo.importance_level=test_plain", "algo.importance_level") == [
        "algo.importance_level='test_plain': expected token or sequence"]
