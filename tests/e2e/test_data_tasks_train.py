"""The data tasks end to end on the tiny model: each tiny config trains; a corrupt image in a
real-data batch is dropped and counted while the run goes on; too many stop it clearly."""

import json
import shutil

import pytest

from mmrlvr.config import load_config
from mmrlvr.data.feed import BadMediaError
from mmrlvr.recipe.loop import train

TINY = [
    "task.train_size=64", "task.eval_size=8", "warm_start.steps=3",
    "warm_start.batch_size=4", "rollout.prompts_per_step=4", "rollout.group_size=2", "train.steps=2",
    "train.log_every=1", "eval.batch_size=8", "verifier_workers=0",
]


@pytest.mark.slow
@pytest.mark.parametrize("task", ["geometry", "chart", "grounding"])
def test_tiny_config_trains_end_to_end(tmp_path, task):
    cfg = load_config(f"configs/{task}_tiny.yaml", TINY + [f"output_dir={tmp_path / task}"])
    summary = train(cfg)
    rows = [json.loads(x) for x in (tmp_path / task / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["data/bad_media"] == 0 for r in steps)
    verifier = {"geometry": ("reward/choice", "reward/math"), "chart": ("reward/number", "reward/exact"),
                "grounding": ("reward/iou",)}[task]
    assert any(k in steps[0] for k in verifier)  # the task's own verifiers scored the rollouts
    assert summary["eval_before"]["n"] == 8 and summary["eval_after"]["n"] == 8


def _mathv_copy(shared_data, tmp_path, corrupt: int):
    """The MATH-V geometry sample with `corrupt` of its images overwritten by garbage."""
    d = tmp_path / "mathv"
    shutil.copytree(shared_data / "geometry_mathv", d)
    rows = [json.loads(x) for x in (d / "annotations.jsonl").read_text().splitlines()][:12]
    (d / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows[:corrupt]:
        (d / r["image"]).chmod(0o644)
        (d / r["image"]).write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return d, [r["id"] for r in rows[:corrupt]]


def _cfg(d, shared_data, tmp_path, extra=()):
    return load_config(None, [  # held-out rows from the intact original, so only training sees the bad file
        "task.name=geometry", f"task.args.data={d / 'annotations.jsonl'}", "task.args.holdout_frac=0",
        f"task.args.eval_data={shared_data / 'geometry_mathv' / 'annotations.jsonl'}", "task.train_size=12", "task.eval_size=4",
        "rollout.prompts_per_step=12", "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1",
        "eval.batch_size=4", "verifier_workers=0", f"output_dir={tmp_path / 'run'}", *extra,
    ])


def test_one_corrupt_image_is_dropped_counted_and_named(shared_data, tmp_path, caplog):
    d, bad_ids = _mathv_copy(shared_data, tmp_path, corrupt=1)
    with caplog.at_level("WARNING", logger="mmrlvr.data"):
        summary = train(_cfg(d, shared_data, tmp_path))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if "reward/mean" in r][0]
    assert step["data/bad_media"] == 1  # 12 prompts, one corrupt image: dropped, run goes on
    warned = [r.getMessage() for r in caplog.records if "bad media" in r.getMessage()]
    assert len(warned) == 1 and f"annotations.jsonl:{bad_ids[0]}" in warned[0] and f"{bad_ids[0]}.jpg" in warned[0]
    assert summary["steps"] == 1


def test_too_many_corrupt_images_stop_the_run(shared_data, tmp_path):
    d, bad_ids = _mathv_copy(shared_data, tmp_path, corrupt=3)
    with pytest.raises(BadMediaError, match=r"3 of 12 rows are bad .*3 with media that fail to decode.*task.max_bad_frac=0.1") as err:
        train(_cfg(d, shared_data, tmp_path, ["task.max_bad_media_frac=0.1"]))
    assert all(f"{i}.jpg" in str(err.value) for i in bad_ids)
