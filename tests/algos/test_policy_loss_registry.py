"""The policy losses are a registry keyed by `algo.importance_level`: what validation accepts and
what `policy_loss` can run are the same names, and a new loss is one registered function."""

import torch

from mmrlvr.algos.losses import POLICY_LOSSES, policy_loss
from mmrlvr.config import load_config
from mmrlvr.checks.validate import IMPORTANCE_LEVELS, config_errors


def refused(name: str) -> bool:
    errors = config_errors(load_config(None, [f"algo.importance_level={name}"]))
    return any(line.startswith("algo.importance_level") for line in errors)


def test_every_importance_level_validation_accepts_is_a_registered_policy_loss():
    accepted = [n for n in (*IMPORTANCE_LEVELS, *POLICY_LOSSES.names(), "word") if not refused(n)]
    assert "word" not in accepted and accepted  # validation refuses an unknown name
    for name in accepted:
        assert name in POLICY_LOSSES, name  # a name validation lets through resolves
    assert set(POLICY_LOSSES.names()) == set(accepted)  # and every registered loss is reachable


def test_a_registered_loss_is_what_policy_loss_runs():
    seen = []

    def half_advantage(logprobs, old_logprobs, advantages, mask, **options):
        seen.append(sorted(options))
        return POLICY_LOSSES.get("token")(logprobs, old_logprobs, advantages / 2, mask, **options)

    POLICY_LOSSES.register("test_half")(half_advantage)
    try:
        lp, old = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -2.0]])
        adv, mask = torch.tensor([[1.0]]), torch.ones(1, 2)
        got, _ = policy_loss(lp, old, adv, mask, importance_level="test_half")
        want, _ = policy_loss(lp, old, adv / 2, mask)
    finally:
        POLICY_LOSSES._items.pop("test_half")
    assert torch.equal(got, want) and seen and "clip_low" in seen[0]
