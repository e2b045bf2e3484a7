"""End to end on video: the tiny model trains on the synthetic motion task with temporal contrast."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train


@pytest.mark.slow
def test_video_run_with_temporal_contrast_logs_and_changes_weights(tmp_path):
    run = tmp_path / "video"
    cfg = load_config("configs/video_motion_contrast_tiny.yaml", [
        f"output_dir={run}", "task.train_size=32", "task.eval_size=8", "warm_start.steps=2",
        "warm_start.batch_size=4", "rollout.prompts_per_step=3", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "rollout.temperature=1.5", "train.steps=2", "train.lr=1e-3",
        "verifier_workers=0", "temporal_contrast.shuffled_samples=2",
        # an untrained policy rarely answers the task: a second term gives the groups mixed rewards
        f"rewards=[{{verifier: choice, weight: 1.0}}, {{verifier: '{Path(__file__).parent / 'user_verifier.py'}:even_length', weight: 0.5}}]",
    ])
    summary = train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # the shuffled-frame rollouts ran and were scored each step
        assert {"temporal/ordered_acc", "temporal/shuffled_acc", "temporal/bonus_frac"} <= set(r)
        assert r["temporal/ordered_acc"] == r["reward/choice"]  # accuracy = the answer verifier's score
    assert summary["eval_after"]["n"] == 8
    warm = load_file(str(run / "warm_start" / "model.safetensors"))
    after = load_file(str(run / "checkpoints" / "step_2" / "model.safetensors"))
    assert any(not (warm[k] == after[k]).all() for k in warm)
