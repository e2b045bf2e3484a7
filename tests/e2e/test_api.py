"""`mmrlvr.run` from Python: the runnable example of docs/how-to/your-verifier.md, in-memory data, reward callables."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

import mmrlvr
from mmrlvr.config import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "api_quickstart.py"


def _example():
    spec = importlib.util.spec_from_file_location("api_quickstart", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_example_runs_with_a_closure_and_a_lambda_in_the_verifier_pool(tmp_path):
    summary = _example().main(str(tmp_path / "run"))
    assert summary["steps"] == 2 and summary["run_dir"] == str(tmp_path / "run")
    assert summary["model_dir"] == str(tmp_path / "run" / "model") and (tmp_path / "run" / "model" / "config.json").is_file()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # both callables scored every completion in the worker pool (verifier_workers=2)
        assert 0.5 <= r["reward/shorter_is_better"] <= 1.0
        assert 0.0 <= r["reward/reward_1"] <= 0.5
        # the lambda read the extra `level` column (n % 2 over counts 1-6: 0 or 1) from sample.meta
        assert 0.0 <= r["reward/reward_1/level"] <= 1.0
    cfg = (tmp_path / "run" / "config.yaml").read_text()
    assert re.search(r"\.mmrlvr_inputs/rewards-[0-9a-f]{16}/rewards\.py:shorter_is_better", cfg) and "seed: 1" in cfg
    row = json.loads((tmp_path / "run" / "samples" / "step_1.jsonl").read_text().splitlines()[0])
    assert row["prompt_text"] == "How many red dots are there?\nGive the final answer inside <answer></answer>."


def test_eval_data_and_errors_are_named(tmp_path):
    with pytest.raises(ConfigError, match="task 'counting' builds its own samples and takes no data"):
        mmrlvr.run({"output_dir": str(tmp_path / "r")}, train_data=[{"question": "q", "answer": "1"}])
    with pytest.raises(ConfigError, match=r"rewards\[0\]: 3 is not callable"):
        mmrlvr.run({"output_dir": str(tmp_path / "r"), "task": {"name": "geometry"}}, rewards=[3])
    with pytest.raises(ConfigError, match="train.steps=0: expected an integer >= 1"):
        mmrlvr.run("configs/geometry_tiny.yaml", overrides=["train.steps=0"])


def test_in_memory_train_and_eval_data_are_read_through_the_column_mapping(tmp_path):
    import datasets
    from PIL import Image

    from mmrlvr.api import as_config, prepare
    from mmrlvr.tasks import load_task

    pic = Image.new("RGB", (56, 56), "white")
    train = [{"pic": pic, "ask": f"q{i}", "ans": str(i), "source": "mine"} for i in range(5)]
    held = datasets.Dataset.from_list([{"pic": pic, "ask": "held", "ans": "9", "source": "theirs"}])
    cfg = as_config({"output_dir": str(tmp_path / "r"), "task": {"name": "geometry", "args": {
        "columns": {"image": "pic", "question": "ask", "answer": "ans"}}}}, ["task.args.holdout_frac=0.5"])
    cfg = prepare(cfg, train_data=train, eval_data=held)
    args = cfg.task.args
    staged = tmp_path / "r" / ".mmrlvr_inputs"
    assert re.fullmatch(rf"{re.escape(str(staged))}/train-[0-9a-f]{{16}}/train", args["data"])
    assert re.fullmatch(rf"{re.escape(str(staged))}/eval-[0-9a-f]{{16}}/eval", args["eval_data"])
    got = load_task("geometry", "train", 10, 0, **args)
    ev = load_task("geometry", "eval", 10, 0, **args)
    # eval has its own data, so every train row trains (holdout_frac applies only without eval_data)
    assert [s.reference for s in got] == ["0", "1", "2", "3", "4"] and [s.reference for s in ev] == ["9"]
    assert ev[0].meta["columns"] == {"source": "theirs"} and got[0].messages[0]["content"][1]["text"] == "q0"


def test_what_python_hands_over_is_taken_or_named_in_one_line(tmp_path):
    """numpy scalars and arrays, pathlib paths and overrides=None are what they mean; a non-string
    override and a dict that contains itself are one ConfigError, not a traceback."""
    import numpy as np

    from mmrlvr.api import as_config

    cfg = as_config({"task": {"name": "counting", "train_size": np.int64(8)}, "train": {"lr": np.float32(0.5)},
                     "output_dir": tmp_path / "run", "rollout": {"group_size": np.array(4)}}, None)
    assert cfg.task.train_size == 8 and type(cfg.task.train_size) is int and cfg.train.lr == 0.5
    assert cfg.output_dir == str(tmp_path / "run") and cfg.rollout.group_size == 4
    with pytest.raises(ConfigError, match=r"overrides\[1\]: expected a 'key=value' string, got None"):
        as_config("configs/quickstart.yaml", ["seed=1", None])
    loop = {"task": {"name": "counting"}}
    loop["task"]["again"] = loop
    with pytest.raises(ConfigError, match="the dict contains itself"):
        as_config(loop)
    from mmrlvr.tasks import UnknownTask, task_module

    with pytest.raises(UnknownTask, match="task name '../../x': expected a task name or a dotted module path"):
        task_module("../../x")
