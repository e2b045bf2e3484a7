"""The command line as a user calls it: train, eval, and the quickstart's promise."""

import json

import pytest

from mmrlvr.cli import main

SMALL = ["task.train_size=64", "task.eval_size=16", "warm_start.steps=2", "warm_start.batch_size=4",
         "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6", "train.steps=2",
         "eval.batch_size=16"]


def test_train_then_eval_a_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "configs/quickstart.yaml", f"output_dir={run}", *SMALL]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) >= {"eval_before", "eval_after", "accuracy_gain", "run_dir"}
    ckpt = run / "checkpoints" / "step_2"
    assert main(["eval", "configs/quickstart.yaml", *SMALL, "--checkpoint", str(ckpt)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 16 and result["accuracy"] == pytest.approx(printed["eval_after"]["accuracy"])


def test_bad_config_key_is_a_clear_error(capsys):
    assert main(["train", "configs/quickstart.yaml", "train.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'train.lrr'" in err and "known:" in err


@pytest.mark.slow
def test_quickstart_learns(tmp_path):
    """The main job as shipped: held-out accuracy rises by at least 10 points."""
    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    summary = train(load_config("configs/quickstart.yaml", [f"output_dir={tmp_path / 'qs'}"]))
    assert summary["eval_before"]["n"] >= 200
    assert summary["eval_after"]["accuracy"] - summary["eval_before"]["accuracy"] >= 0.10
