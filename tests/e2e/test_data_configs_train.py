"""The tiny configs on the shared real samples train end to end on the tiny model: the generic task
on the raccoon photos (counts as references, columns renamed, `number` verifier), nextqa and
temporal_grounding on the shared clips. Skipped, with the reason, where the shared data is absent."""

import json

import pytest

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train

TINY = [
    "task.train_size=8", "task.eval_size=4", "warm_start.steps=2", "warm_start.batch_size=4",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "train.steps=2", "train.log_every=1",
    "eval.batch_size=4", "verifier_workers=0",
]


def _steps(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "reward/mean" in r]


@pytest.mark.slow
def test_generic_tiny_config_trains_on_the_raccoon_photos(shared_data, tmp_path):
    cfg = load_config("configs/generic_tiny.yaml", TINY + [
        f"task.args.image_root={shared_data / 'grounding_raccoon' / 'images'}", f"output_dir={tmp_path / 'run'}"])
    summary = train(cfg)
    steps = _steps(tmp_path / "run")
    assert [r["step"] for r in steps] == [1, 2] and all(r["data/bad_media"] == 0 for r in steps)
    assert "reward/number" in steps[0]  # the configured verifier scored the rollouts
    assert summary["eval_before"]["n"] == 4 and summary["eval_after"]["n"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("task,verifier,n_eval", [("nextqa", "reward/choice", 2), ("temporal_grounding", "reward/tiou", 3)])
def test_video_tiny_configs_train_on_the_shared_clips(shared_data, tmp_path, task, verifier, n_eval):
    cfg = load_config(f"configs/{task}_tiny.yaml", [
        "train.steps=2", "train.log_every=1", "rollout.prompts_per_step=2", "rollout.group_size=2", "verifier_workers=0",
        f"task.args.video_dir={shared_data / 'video_clips'}", f"output_dir={tmp_path / task}"])
    summary = train(cfg)
    steps = _steps(tmp_path / task)
    assert [r["step"] for r in steps] == [1, 2] and all(r["data/bad_media"] == 0 for r in steps)  # every clip decoded
    assert verifier in steps[0]
    assert summary["eval_before"]["n"] == n_eval and summary["eval_after"]["n"] == n_eval  # whole videos held out
