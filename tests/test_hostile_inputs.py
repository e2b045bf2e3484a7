"""What a user can hand over wrongly, from the config, the command line or Python, is one line
naming the key, file or row (a ConfigError or DataError), never a traceback; what Python hands
over as it comes (a Path, numpy scalars, overrides=None) simply works."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from mmrlvr.api import as_config, check_inputs
from mmrlvr.config import ConfigError, load_config
from mmrlvr.data.io import BadRow, DataError, open_dataset
from mmrlvr.data.prompts import PromptSpec
from mmrlvr.checks.validate import validate_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "configs" / "quickstart.yaml")


def _cfg(*overrides):
    return validate_config(load_config(QUICK, list(overrides)))


def _api(config=None, overrides=(), **inputs):
    cfg = validate_config(as_config(config or {"task": {"name": "geometry"}, "output_dir": "runs/x"}, overrides))
    return cfg, check_inputs(cfg, **inputs)


def _self_containing():
    raw = {"task": {"name": "counting", "args": {}}, "output_dir": "runs/x"}
    raw["task"]["args"]["me"] = raw["task"]["args"]
    return as_config(raw)


# name: (what the user does, the one line it must give)
REFUSED = {
    "train.steps=null": (lambda: _cfg("train.steps=null"), r"train\.steps: expected int, got null"),
    "task.name=../../x": (lambda: _cfg("task.name=../../x"), r"task\.name='\.\./\.\./x': a task module; known: "),
    "output_dir=": (lambda: _cfg("output_dir="), r"output_dir='': expected a non-empty path"),
    "task.args=[1, 2]": (lambda: _cfg("task.args=[1, 2]"), r"task\.args: expected a mapping, got \[1, 2\]"),
    "prompt_template=3": (lambda: _cfg("task.args.prompt_template=3"),
                          r"task\.args\.prompt_template=3: expected the path of a Jinja template"),
    "system_prompt=[1]": (lambda: _cfg("task.args.system_prompt=[1]"),
                          r"task\.args\.system_prompt=\[1\]: expected text \(a system turn before the user turn\)"),
    "override not YAML": (lambda: _cfg("task.args={a:"), r"override 'task\.args': value '\{a:' is not valid YAML"),
    "overrides=[None]": (lambda: as_config(QUICK, [None]), r"overrides\[0\]: expected a 'key=value' string, got None"),
    "overrides a string": (lambda: as_config(QUICK, "seed=1"), r"overrides: expected a list of 'key=value' strings, got str"),
    "rewards=[len]": (lambda: _api(rewards=[len]), r"rewards\[0\] \(len\): 'len' takes \(obj\); expected fn\(completion, sample\)"),
    "rewards=len (not in a list)": (lambda: _api(rewards=len), r"rewards\[0\] \(len\): 'len' takes \(obj\); expected fn"),
    "rewards=3": (lambda: _api(rewards=3), r"rewards: expected a callable or a list of callables .*, got 3; a registered"),
    "rewards a verifier name": (lambda: _api(rewards="choice"), r"rewards: expected a callable or a list .*, got 'choice'"),
    "a dict containing itself": (_self_containing, r"config\.task\.args\.me: the dict contains itself"),
    "a column of int and str": (lambda: _api(train_data=[{"question": "q", "answer": 3}, {"question": "r", "answer": None},
                                                         {"question": "s", "answer": "four"}]),
                                r"train_data: column 'answer': row 0 holds number, row 2 holds str; give every row the same"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_hostile_input_is_one_named_line(case):
    make, line = REFUSED[case]
    with pytest.raises(ConfigError, match=line) as err:
        make()
    assert "\n" not in str(err.value)


def test_a_csv_column_that_changes_kind_is_named_with_its_row(tmp_path):
    """The reader fixes a column's type from its first block of rows; text under numbers 12,000
    rows later is one line naming the row and column (the question column holds 'two' too, as text
    from its first row, and is not the one named)."""
    rows = ["question,answer", "two,0"] + [f"q{i},{i}" for i in range(1, 12000)] + ["qx,two"]
    (tmp_path / "rows.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError) as err:
        open_dataset(str(tmp_path / "rows.csv"), cache_dir=str(tmp_path / "cache"))
    assert str(err.value) == (f"{tmp_path / 'rows.csv'}: row 12000, column 'answer': 'two' is text where the rows "
                              "before hold int64 (a column is read as one type); make the column's values one kind, "
                              "or use JSONL")


def test_what_python_hands_over_as_it_comes_works():
    cfg = as_config({"output_dir": pathlib.Path("runs") / "p", "train": {"steps": np.int64(3), "lr": np.float32(0.25)}}, None)
    cfg = validate_config(cfg)
    assert (cfg.output_dir, cfg.train.steps, type(cfg.train.steps), cfg.train.lr) == ("runs/p", 3, int, 0.25)
    def shorter(completion, sample):
        return float(len(completion) < 9)

    (name, _, weight), = check_inputs(cfg, rewards=shorter).rewards  # one function, as TRL takes it
    assert (name, weight) == ("shorter", 1.0)
    # a null section is that section's defaults, as `rollout:` with nothing under it
    assert _cfg("rollout=null", "train=null", "task.args=null").rollout.group_size == 8


# template text: the one line its rendering gives (each row of a data task is reported with it)
TEMPLATES = {
    "{{ 1/0 }} <answer>": "ZeroDivisionError: division by zero",
    "{% include 'x.jinja' %} <answer>": "TypeError: no loader for this environment specified",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }} <answer>": "recursion too deep while rendering",
    "{{ question * 1000000 }} <answer>": "OverflowError: repeating a sequence of \\d+ 1000000 times makes more than 1,000,000 items",
    "{{ 7 ** 100000 }} <answer>": "OverflowError: 7 \\*\\* 100000 has more than 4096 bits",
    "{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}{% endfor %}<answer>":
        "OverflowError: the template's range\\(\\) calls draw more than 100,000 items in all",
    "{% for i in range(1000) %}{{ question }}{% for j in range(99) %}{{ 'abcdefghijk' }}{% endfor %}{% endfor %}<answer>":
        "OverflowError: the rendered prompt passes 1,000,000 characters",
}


@pytest.mark.parametrize("text", sorted(TEMPLATES))
def test_a_failing_template_is_one_line_naming_it_and_the_row(text, shared_data, tmp_path):
    from mmrlvr.tasks import load_task

    (tmp_path / "t.jinja").write_text(text)
    reason = TEMPLATES[text]
    with pytest.raises(BadRow, match=rf"^prompt_template .*t\.jinja: {reason}"):
        PromptSpec(text=text, path=str(tmp_path / "t.jinja")).render({"question": "qq"})
    data = shared_data / "geometry_mathv"
    with pytest.raises(DataError, match=rf"annotations\.jsonl: all \d+ rows are bad; first: row 0: prompt_template "
                                        rf".*t\.jinja: {reason}; row 1: "):
        load_task("geometry", "train", 3, 0, data=str(data / "annotations.jsonl"), image_root=str(data),
                  prompt_template=str(tmp_path / "t.jinja"), holdout_frac=0.0, max_bad_frac=0.0)


def test_a_template_nested_too_deeply_to_parse_is_named_before_the_model_loads(tmp_path):
    (tmp_path / "deep.jinja").write_text("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }} <answer>")
    with pytest.raises(ConfigError, match=rf"^task\.args\.prompt_template='{tmp_path}/deep\.jinja': nested too deeply to parse$"):
        _cfg(f"task.args.prompt_template={tmp_path / 'deep.jinja'}")


def test_bounds_leave_ordinary_templates_alone():
    text = "{{ 2 ** 10 }} {{ 'ab' * 3 }} {% for i in range(3) %}{{ i }}{% endfor %} {{ question | upper }}"
    assert PromptSpec(text=text, path="t.jinja").render({"question": "qq"}) == "1024 ababab 012 QQ"


@pytest.mark.parametrize("override", ["task.args={a:", "task.name=../../x"])
def test_the_command_line_exits_2_with_one_line_before_the_model_loads(override, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", QUICK, f"output_dir={tmp_path / 'r'}", override],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr.startswith("mmrlvr: error: ") and got.stderr.count("\n") == 1, got.stderr
    assert not (tmp_path / "r").exists()
