"""Every task argument is typed by the task's own build() declaration and checked before any row is
read: one line naming the key, the value and the type (exit 2), never a TypeError after the data loads."""

import os
import subprocess
import sys
from pathlib import Path

from mmrlvr.config import load_config
from mmrlvr.config.arg_types import accepts, expected
from mmrlvr.checks.validate import config_errors

ROOT = Path(__file__).resolve().parents[2]


def _task_lines(overrides):
    return [e for e in config_errors(load_config(None, overrides)) if e.startswith("task.args.")]


def test_a_value_of_the_wrong_type_is_one_line_with_the_key_value_and_type():
    assert _task_lines(["task.name=counting", "task.args.max_red=five", "task.args.flaw_prob=high"]) == [
        "task.args.max_red='five': expected an integer (int), as task 'counting' declares it",
        "task.args.flaw_prob='high': expected a number (float), as task 'counting' declares it"]
    # one line per key: values with a check of their own (columns, template, max_bad_frac) keep its words
    assert _task_lines(["task.name=geometry", "task.args.holdout_frac=two", "task.args.columns=5",
                        "task.args.template=7", "task.args.max_bad_frac=high"]) == [
        "task.args.holdout_frac='two': expected a number (float), as task 'geometry' declares it",
        "task.args.columns=5: a mapping of task field -> column name (or list of names)",
        "task.args.template=7: one of answer, think, plain",
        "task.args.max_bad_frac='high': a fraction in [0, 1]"]


def test_values_of_the_declared_type_pass():
    # an integer where a number is declared, a YAML list for a tuple, null for an optional value
    assert _task_lines(["task.name=chart", "task.args.flaw_prob=1", "task.args.kinds=[bar]", "task.args.max_bad_frac=null",
                        "task.args.holdout_frac=0.5"]) == []
    assert _task_lines(["task.name=grounding", "task.args.ramp=false", "task.args.pad=3"]) == []
    assert _task_lines(["task.name=grounding", "task.args.ramp=1", "task.args.pad=3.5"]) == [
        "task.args.ramp=1: expected true or false (bool), as task 'grounding' declares it",
        "task.args.pad=3.5: expected an integer (int), as task 'grounding' declares it"]


def test_the_type_rules():
    assert accepts(float, 3) and not accepts(float, True) and not accepts(int, 2.0) and accepts(int | None, None)
    assert accepts(tuple, [1]) and not accepts(str, 5) and accepts(object, "anything")
    assert expected(float | None) == "a number (float) or null" and expected(bool) == "true or false (bool)"


def test_the_cli_refuses_before_reading_data_with_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/generic_tiny.yaml",
                           "task.args.holdout_frac=two", f"task.args.data={tmp_path / 'none.jsonl'}",
                           f"output_dir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "mmrlvr: error: task.args.holdout_frac='two': expected a number (float), as task 'generic' declares it"]
    assert not (tmp_path / "run").exists()
