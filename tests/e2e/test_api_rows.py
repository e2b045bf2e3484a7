"""Your own rows from Python, any task that reads rows: `train_data=` fills `task.args.data`,
`rewards=` stand in for a task's verifier, and what is wrong with a row is said in the user's
terms (`train_data`, the row's index in the list), never as the staged `.mmrlvr_inputs/` path."""

import json

import pytest
from PIL import Image

import mmrlvr
from mmrlvr.config import ConfigError, load_config
from mmrlvr.config.validate import config_errors
from mmrlvr.data.io import DataError


def _config(run_dir, **args) -> dict:
    """A generic-task run kept to seconds: one RL step of 2 prompts x 2 completions, 4 new tokens."""
    return {"output_dir": str(run_dir), "task": {"name": "generic", "train_size": 6, "eval_size": 2, "args": args},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4},
            "train": {"steps": 1, "log_every": 1, "save_every": 0, "log_with": []}, "eval": {"batch_size": 4},
            "warm_start": {"steps": 0}}


def has_reference(completion: str, sample) -> float:
    return float(sample.reference in completion)


def test_generic_rows_from_python_train_with_the_reward_callable_and_no_verifier(tmp_path):
    pic = Image.new("RGB", (56, 56), "white")
    rows = [{"picture": pic, "ask": f"How many dots? ({i})", "gold": str(i % 3)} for i in range(8)]
    summary = mmrlvr.run(_config(tmp_path / "run", columns={"image": "picture", "question": "ask", "answer": "gold"}),
                         train_data=rows, rewards=[has_reference])
    assert summary["steps"] == 1
    cfg = (tmp_path / "run" / "config.yaml").read_text()
    assert "/.mmrlvr_inputs/train-" in cfg and "verifier:" not in cfg.split("args:")[1].split("rewards:")[0]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("reward/has_reference" in r for r in metrics)  # the callable scored the rows, not task.args.verifier
    sample = json.loads((tmp_path / "run" / "samples" / "step_1.jsonl").read_text().splitlines()[0])
    assert sample["prompt_text"].startswith("How many dots?")


def test_a_verifier_is_optional_only_when_rewards_score_the_rows(tmp_path):
    base = ["task.name=generic", "task.args.data=rows.jsonl", "warm_start.steps=0"]
    assert not any(e.startswith("task.args.verifier") for e in config_errors(load_config(None, base + ["rewards=[{verifier: exact}]"])))
    errs = config_errors(load_config(None, base))
    assert [e for e in errs if e.startswith("task.args.verifier")] == [
        "task.args.verifier=None: a registered verifier to score every row, or reward terms in rewards: "
        "(rewards= in mmrlvr.run); known: "
        + ", ".join(__import__("mmrlvr.verifiers.base", fromlist=["x"]).available_verifiers())]
    # a verifier that is named must exist, rewards or not
    errs = config_errors(load_config(None, base + ["rewards=[{verifier: exact}]", "task.args.verifier=nubmer"]))
    assert any(e.startswith("task.args.verifier='nubmer'") for e in errs)
    # mmrlvr.run without a reward callable or a verifier: refused before anything is written
    with pytest.raises(ConfigError, match=r"task.args.verifier=None: a registered verifier to score every row, or reward terms"):
        mmrlvr.run(_config(tmp_path / "r2"), train_data=[{"question": "q", "answer": "1"}])
    assert not (tmp_path / "r2").exists()


def test_bad_rows_and_missing_columns_are_named_as_the_user_gave_them(tmp_path):
    rows = [{"image": str(tmp_path / f"gone{i}.png") if i in (1, 3) else None, "question": f"q{i}", "answer": "1"}
            for i in range(6)]
    with pytest.raises(DataError) as err:
        mmrlvr.run(_config(tmp_path / "run"), train_data=rows, rewards=[has_reference])
    text = str(err.value)
    assert ".mmrlvr_inputs" not in text and text.startswith("train_data: 2 of 6 rows are bad")
    assert f"first: row 1: image file not found: {tmp_path / 'gone1.png'}; row 3: image file not found" in text
    with pytest.raises(DataError) as err:
        mmrlvr.run(_config(tmp_path / "run"), train_data=[{"text": "q", "gold": "1"}], rewards=[has_reference])
    assert str(err.value) == ("train_data: no column for 'answer' (looked for 'answer', 'solution', 'reference', 'label'); "
                              "no column for 'prompt' or 'question' (looked for 'prompt', 'question', 'problem', 'query'); "
                              "columns: text, gold; set task.args.columns.answer, task.args.columns.question")


def test_an_unmapped_picture_column_from_python_is_refused_before_the_model_loads(tmp_path):
    pic = Image.new("RGB", (56, 56), "white")
    rows = [{"picture": pic, "question": f"q{i}", "answer": "1"} for i in range(4)]
    with pytest.raises(DataError) as err:
        mmrlvr.run(_config(tmp_path / "run"), train_data=rows, rewards=[has_reference])
    assert str(err.value) == ("train_data: column 'picture' holds images (image data, not paths) that no column key "
                              "reads, so every sample would train without them; set task.args.columns.image: picture")
    assert not (tmp_path / "run" / "model").exists()
