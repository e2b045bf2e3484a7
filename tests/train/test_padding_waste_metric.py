"""`train/padding_waste` (tokens the update's forwards computed / valid ones) is in metrics.jsonl at
every step, with and without `train.padding_free`, including a step whose update ran no forward."""

from __future__ import annotations

import json

import pytest

from mmrlvr.config import load_config
from mmrlvr.train.update_stats import padding_waste


def test_the_ratio_is_finite_when_nothing_or_only_waste_was_computed():
    assert padding_waste(30, 20) == 1.5
    assert padding_waste(0, 0) == 1.0  # no forward ran: nothing computed, nothing wasted
    assert padding_waste(12, 0) == 12.0  # zero-weight passes only: every computed token is waste


def _steps(tmp_path, *over: str) -> list[dict]:
    from mmrlvr.recipe.loop import train

    out = tmp_path / "run"
    train(load_config("configs/quickstart.yaml", [
        f"output_dir={out}", "warm_start.steps=0", "train.steps=2", "train.log_every=1", "rollout.prompts_per_step=2",
        "rollout.group_size=2", "rollout.max_new_tokens=4", "task.eval_size=2", "train.eval_every=0",
        "train.save_every=0", "verifier_workers=0", *over]))
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if "reward/mean" in r]


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_logged_every_step_with_and_without_packing(tmp_path, packed):
    # the untrained tiny model scores 0 on every completion: every advantage is 0, and without an
    # entropy bonus the update runs no forward at all
    idle = _steps(tmp_path / "idle", f"train.padding_free={packed}")
    assert [r["step"] for r in idle] == [1, 2]
    assert all(r["reward/mean"] == 0.0 and r["train/padding_waste"] == 1.0 for r in idle)
    # an entropy bonus puts every row in the update's forward
    busy = _steps(tmp_path / "busy", f"train.padding_free={packed}", "algo.entropy_coef=0.01")
    assert [r["step"] for r in busy] == [1, 2]
    for r in busy:
        if packed:
            assert r["train/padding_waste"] == 1.0  # real tokens only
        else:
            assert r["train/padding_waste"] >= 1.0
