"""What a new user meets in the first hour: LR schedules, trackers, run-dir files, --help,
`mmrlvr config --show`, portable LoRA checkpoints and `--merge`."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from mmrlvr.cli import main
from mmrlvr.config import ConfigError, load_config
from mmrlvr.recipe import loop
from mmrlvr.train.learner import Learner
from mmrlvr.recipe.loop import train

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
SMALL = [
    "task.train_size=64", "task.eval_size=8", "warm_start.steps=0", "rollout.prompts_per_step=4",
    "rollout.group_size=4", "rollout.max_new_tokens=6", "train.steps=4", "train.save_every=2",
    "train.log_every=1", "train.lr=1e-3", "eval.batch_size=8",
]


def _rows(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _steps(run):
    return {r["step"]: r for r in _rows(run) if "reward/mean" in r}


def test_cosine_schedule_is_logged_and_resumes_exactly(tmp_path, monkeypatch):
    sched = ["train.lr_scheduler=cosine", "train.warmup_steps=1"]
    straight = tmp_path / "straight"
    train(load_config("configs/quickstart.yaml", [*SMALL, *sched, f"output_dir={straight}"]))
    lrs = [_steps(straight)[s]["actor/lr"] for s in (1, 2, 3, 4)]
    # warm-up 1 step from 0, then cosine over the remaining 3: 0.5 * (1 + cos(pi * k / 3)) * 1e-3
    assert lrs == pytest.approx([0.0, 1e-3, 7.5e-4, 2.5e-4])

    # kill a run during step 3 (after the step-2 checkpoint), then run the same command again
    killed = tmp_path / "killed"
    real_update, calls = Learner.update, []

    def dying_update(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_update(*args, **kwargs)

    monkeypatch.setattr(Learner, "update", dying_update)
    with pytest.raises(KeyboardInterrupt):
        train(load_config("configs/quickstart.yaml", [*SMALL, *sched, f"output_dir={killed}"]))
    monkeypatch.setattr(Learner, "update", real_update)
    train(load_config("configs/quickstart.yaml", [*SMALL, *sched, f"output_dir={killed}"]))
    a, b = _steps(straight), _steps(killed)
    assert [b[s]["actor/lr"] for s in (3, 4)] == pytest.approx(lrs[2:])  # the schedule's position was restored
    assert b[4]["loss/policy"] == pytest.approx(a[4]["loss/policy"], abs=1e-6)


def test_run_dir_config_is_resolved_samples_span_prompts_and_trackers_get_the_metrics(tmp_path):
    run = tmp_path / "run"
    train(load_config("configs/quickstart.yaml", [*SMALL, "train.steps=1", f"output_dir={run}"]))
    saved = yaml.safe_load((run / "config.yaml").read_text())
    # the grpo preset's values, written out instead of null, and the file reloads as the same run
    assert saved["algo"]["clip_low"] == 0.2 and saved["algo"]["advantage"] == "grpo"
    assert saved["eval"]["max_new_tokens"] == 6
    assert load_config(run / "config.yaml").algo.aggregation == "token-mean"
    samples = [json.loads(x) for x in (run / "samples" / "step_1.jsonl").read_text().splitlines()]
    assert sorted({s["prompt"] for s in samples}) == [0, 1, 2, 3] and len({s["id"] for s in samples}) == 4
    rows = _rows(run)
    assert {"eval/counting/accuracy", "eval/counting/reward", "eval/counting/count"} <= set(rows[0])
    assert rows[0]["step"] == 0  # before RL
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard")).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"actor/lr", "reward/mean", "eval/counting/accuracy"} <= tags
    assert events.Scalars("actor/lr")[0].value == pytest.approx(1e-3)


def test_trackers_off_and_unknown_trackers(tmp_path):
    run = tmp_path / "quiet"
    train(load_config("configs/quickstart.yaml", [*SMALL, "train.steps=1", "train.log_with=[]", f"output_dir={run}"]))
    assert (run / "metrics.jsonl").exists() and not (run / "tensorboard").exists()
    with pytest.raises(ConfigError, match="train.log_with='tensorbored': expected an accelerate tracker; known: .*tensorboard"):
        train(load_config("configs/quickstart.yaml", [*SMALL, "train.log_with=[tensorbored]", f"output_dir={run}"]))
    from mmrlvr.checks.validate import tracker_problem

    assert tracker_problem("tensorboard") is None
    for name in ("wandb", "mlflow", "trackio"):  # named with the install command when missing
        assert tracker_problem(name) in (None, f"an installed tracker (pip install {name})")
    bad = ["train.lr_scheduler=cosin", "train.warmup_steps=-1", "eval.verifiers=[no_such_verifier]"]
    with pytest.raises(ConfigError) as err:
        train(load_config("configs/quickstart.yaml", [*SMALL, *bad, f"output_dir={run}"]))
    for key in ("train.lr_scheduler='cosin'", "train.warmup_steps=-1", "eval.verifiers[0]='no_such_verifier'"):
        assert key in str(err.value)


def test_help_and_config_show_list_every_key_with_its_doc(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert "mmrlvr config --show" in text and "warm_start" in text and "rollout" in text
    assert main(["config", "--show", "configs/quickstart.yaml", "train.lr_scheduler=linear"]) == 0
    shown = capsys.readouterr().out
    assert yaml.safe_load(shown)["train"]["lr_scheduler"] == "linear"  # valid YAML, the resolved values
    assert "warmup_steps: 0  # RL steps of linear warm-up" in shown
    assert "group_size: 8  # G: completions sampled per prompt." in shown


def test_lora_checkpoint_loads_from_anywhere_and_merges(tmp_path, tiny_dir, monkeypatch):
    from transformers import AutoModelForImageTextToText

    from mmrlvr.recipe.eval_cli import run_eval

    here = tmp_path / "project"
    here.mkdir()
    shutil.copytree(tiny_dir, here / "base")
    monkeypatch.chdir(here)  # the user names the base model by a relative path
    lora = ["model.path=base", "model.lora_rank=4", "model.lora_alpha=8", "train.lr=5e-3", "train.steps=2",
            "output_dir=run"]
    train(load_config(QUICKSTART, [*SMALL, *lora]))
    ckpt = here / "run" / "checkpoints" / "step_2"
    base = json.loads((ckpt / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str((here / "base").resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(here / "run" / "config.yaml")
    report = run_eval(cfg, str(ckpt))
    assert report["n"] == 8
    assert main(["merge", str(ckpt), str(elsewhere / "merged")]) == 0
    merged = AutoModelForImageTextToText.from_pretrained(elsewhere / "merged")  # no peft involved
    assert not any("lora" in name for name, _ in merged.named_parameters())
    again = run_eval(cfg, str(elsewhere / "merged"))
    assert again["accuracy"] == report["accuracy"] and again["examples"] == report["examples"]
