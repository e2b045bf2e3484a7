"""Your own rows from Python, any task that reads rows: `train_data=` fills `task.args.data`,
`rewards=` stand in for a task's verifier, and what is wrong with a row is said in the user's
terms (`train_data`, the row's index in the list), never as the staged `.mmrlvr_inputs/` path."""

import json

import pytest
from PIL import Image

import mmrlvr
from mmrlvr.config import ConfigError, load_config
from mmrlvr.checks.validate import config_errors
from mmrlvr.data.io import DataError


def _config(run_dir, **args) -> dict:
    """A generic-task run kept to seconds: one RL step of 2 prompts x 2 completions, 4 new tokens."""
    return {"output_dir": str(run_dir), "task": {"name": "generic", "train_size": 6, "eval_size": 2, "args": args},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4},
            "train": {"steps": 1, "log_every": 1, "save_every": 0, "log_with": []}, "eval": {"batch_size": 4},
            "warm_start": {"steps": 0}}


def has_reference(completion: str, sample) -> float:
    return float(sample.reference in completion)


def test_generic_rows_from_python_train_with_the_reward_callable_and_no_verifier(tmp_path, capfd):
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
    # 8 rows hold out 1: the small-split note, once (the run's last line), for rows of the user's data
    said = " ".join(capfd.readouterr().err.split())  # the console wraps lines at its width
    assert said.count("only 1 held-out rows: one answer moves accuracy by 100 points") == 1


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
                              "no column for 'question' or 'prompt' (looked for 'question', 'problem', 'query', 'prompt'); "
                              "columns: text, gold; set task.args.columns.answer, task.args.columns.question")


def test_an_unmapped_picture_column_from_python_is_refused_before_the_model_loads(tmp_path):
    pic = Image.new("RGB", (56, 56), "white")
    rows = [{"picture": pic, "question": f"q{i}", "answer": "1"} for i in range(4)]
    with pytest.raises(DataError) as err:
        mmrlvr.run(_config(tmp_path / "run"), train_data=rows, rewards=[has_reference])
    assert str(err.value) == ("train_data: column 'picture' holds images (image data, not paths) that no column key "
                              "reads, so every sample would train without them; set task.args.columns.image: picture")
    assert not (tmp_path / "run" / "model").exists()


def test_a_reward_that_raises_is_named_by_its_own_error_and_counted_by_the_step(tmp_path, capfd, caplog):
    """A synthetic task (its own eval draw, no small-split note); a reward raising KeyError on every
    item: the warning names the KeyError (not verifier_timeout), the stop counts the step's own
    4 x 4 completions (not the 4 evaluated before RL as well)."""
    from mmrlvr.verifiers.failures import BrokenRewardError

    def needs_level(completion, sample):
        return float(sample.meta["level"])

    cfg = {"output_dir": str(tmp_path / "run"), "task": {"name": "counting", "train_size": 8, "eval_size": 4},
           "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4}, "verifier_workers": 0,
           "train": {"steps": 1, "log_every": 1, "save_every": 0, "log_with": []}, "eval": {"batch_size": 4},
           "warm_start": {"steps": 0}}
    with pytest.raises(BrokenRewardError) as err:
        mmrlvr.run(cfg, rewards=[needs_level])
    assert str(err.value).startswith("reward 'needs_level' (a reward callable passed to mmrlvr.run) failed on all 16 "
                                     "items of this step (first error: raised KeyError: 'level')")
    said = " ".join(capfd.readouterr().err.split()) + "\n" + "\n".join(r.getMessage() for r in caplog.records)
    assert ("verifier 'needs_level' (a reward callable passed to mmrlvr.run) failed on 4 of 4 items (100%; first: raised "
            "KeyError: 'level'); its failures score 0, as a wrong answer would: fix the KeyError the verifier raises "
            "(more time would not help)") in said
    assert "verifier_timeout" not in said and "held-out rows" not in said


def test_the_small_split_note_prints_once_and_only_for_rows_held_out_of_data(tmp_path, capfd):
    from mmrlvr.cli import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(10)))
    small = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1",
             "train.save_every=0", "train.log_with=[]", "warm_start.steps=0", "eval.batch_size=4"]
    assert main(["train", "configs/quickstart.yaml", f"output_dir={tmp_path / 'a'}", "task.name=generic",
                 f"task.args={{data: {rows}, verifier: exact}}", *small]) == 0
    said = " ".join(capfd.readouterr().err.split())
    assert said.count("only 1 held-out rows") == 1  # the run's last line; the command adds no second note
    # a synthetic task's 4-board eval split is its own draw, not rows held out of a file: no such advice
    assert main(["train", "configs/quickstart.yaml", f"output_dir={tmp_path / 'b'}", "task.eval_size=4", *small]) == 0
    assert "held-out rows" not in " ".join(capfd.readouterr().err.split())



def test_eval_prints_the_small_split_note_once_and_only_for_rows_held_out_of_a_file(tmp_path, capfd):
    from mmrlvr.cli import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(10)))
    generic = ["task.name=generic", f"task.args={{data: {rows}, verifier: exact}}", "rollout.max_new_tokens=4"]

    def said(*argv: str) -> tuple[str, dict]:
        out = tmp_path / f"{len(list(tmp_path.glob('*.json')))}.json"
        assert main(["eval", "configs/quickstart.yaml", "--checkpoint", "tiny", "--out", str(out), *argv]) == 0
        cap = capfd.readouterr()
        return " ".join((cap.out + cap.err).split()), json.loads(out.read_text())

    # 10 rows, holdout_frac 0.1: 1 held out, one answer moves accuracy by 100 / 1 = 100 points
    text, report = said(*generic)
    assert report["n"] == 1 and report["generated"] is False
    assert text.count("held-out rows") == 1
    assert "note only 1 held-out rows: one answer moves accuracy by 100 points; use eval_data" in text
    # a synthetic task's 4-board eval split is its own draw, not rows held out of a file: no such advice
    text, report = said("task.eval_size=4", "rollout.max_new_tokens=4")
    assert report["n"] == 4 and report["generated"] is True and "held-out rows" not in text
    # the training split (9 rows) is not held out at all
    text, report = said(*generic, "--split", "train")
    assert report["n"] == 9 and "held-out rows" not in text

def test_eval_data_for_a_task_that_reads_none_is_refused_before_anything_is_written(tmp_path):
    rows = [{"video": "a.mp4", "question": "q", "answer": "yes", "options": ["yes", "no"]}]
    with pytest.raises(ConfigError, match=r"^eval_data: task 'nextqa' reads no eval_data; it holds out "
                                          r"task.args.holdout_frac of train_data instead$"):
        mmrlvr.run({"output_dir": str(tmp_path / "run"), "task": {"name": "nextqa"}}, train_data=rows, eval_data=rows)
    assert not (tmp_path / "run").exists()
