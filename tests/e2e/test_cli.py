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
    table = capsys.readouterr().out
    report = json.loads((run / "checkpoints" / "step_2.eval.json").read_text())  # default: beside the checkpoint
    assert not (ckpt / "eval.json").exists()
    assert report["n"] == 16 and report["accuracy"] == pytest.approx(printed["eval_after"]["accuracy"])
    assert report["task"] == "counting" and report["skipped"] == [] and "mean@2" not in report
    shown = dict(line.rsplit(None, 1) for line in table.splitlines())
    assert shown["accuracy"] == f"{report['accuracy']:.4f}" and shown["skipped rows"] == "0"
    assert report["count"] == report["accuracy"] and "reward" in report


def test_eval_of_the_untrained_tiny_model_with_samples(tmp_path, capsys):
    out = tmp_path / "r" / "report.json"
    argv = ["eval", "configs/quickstart.yaml", *SMALL, "task.eval_size=6", "--checkpoint", "tiny",
            "--samples", "3", "--out", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 6 and report["checkpoint"] == "tiny"
    assert report["pass@3"] >= report["mean@3"]
    assert set(report) >= {"task", "n", "accuracy", "skipped", "count", "reward", "mean@3", "pass@3"}
    table = capsys.readouterr().out
    assert "pass@3" in table and "mean@3" in table


def test_missing_checkpoint_says_no_such_directory(tmp_path, capsys):
    for path in (str(tmp_path / "nope" / "step_80"), "runs/nope/checkpoints/step_80", "step_80"):
        assert main(["eval", "configs/quickstart.yaml", "--checkpoint", path]) == 2
        err = capsys.readouterr().err
        assert "no such directory" in err and path in err, err


def test_bad_config_key_is_a_clear_error(capsys):
    assert main(["train", "configs/quickstart.yaml", "train.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'train.lrr'" in err and "known:" in err


@pytest.mark.slow
def test_quickstart_learns(tmp_path):
    """The main job as shipped: held-out accuracy rises by at least 10 points."""
    from mmrlvr.config import load_config
    from mmrlvr.recipe.loop import train

    summary = train(load_config("configs/quickstart.yaml", [f"output_dir={tmp_path / 'qs'}"]))
    assert summary["eval_before"]["n"] >= 200
    assert summary["eval_after"]["accuracy"] - summary["eval_before"]["accuracy"] >= 0.10


def test_overrides_may_follow_the_options(tmp_path, capsys):
    """`mmrlvr eval CONFIG --checkpoint X key=val` (overrides after an option) is read as overrides,
    in the order given; an unknown flag is still refused."""
    out = tmp_path / "report.json"
    assert main(["eval", "configs/quickstart.yaml", "--checkpoint", "tiny", "task.eval_size=3",
                 "--out", str(out), "eval.batch_size=3"]) == 0
    import json

    assert json.loads(out.read_text())["n"] == 3
    with pytest.raises(SystemExit):
        main(["eval", "configs/quickstart.yaml", "--checkpoint", "tiny", "--no-such-flag"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
