"""A mistyped key is one line that names the closest real key, and blames the override (not the
YAML file) when an override set the bad key or value."""

import pytest

from mmrlvr.api import as_config
from mmrlvr.cli import main
from mmrlvr.config import Config, ConfigError, load_config
from mmrlvr.config.keys import did_you_mean, schema_keys


def _error(path, overrides) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    return str(err.value)


def test_near_miss_keys_name_the_schema_key():
    assert did_you_mean("rollout.group_siz", Config) == "rollout.group_size"
    assert did_you_mean("train.group_size", Config) == "rollout.group_size"  # right name, wrong section
    assert did_you_mean("rewards[1].wieght", Config) == "rewards[1].weight"  # the position is kept
    assert did_you_mean("model.max_pixel", Config) == "model.max_pixels"
    assert did_you_mean("zzzz", Config) is None  # nothing close: no guess
    assert {"seed", "rollout.group_size", "rewards[].verifier", "train.lr"} <= set(schema_keys(Config))


def test_a_yaml_typo_blames_the_file_and_suggests_the_key(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  group_siz: 4\n")
    msg = _error(path, ["train.lr=0.5"])  # an override of another key is not to blame
    assert msg.startswith(f"{path}: unknown config key 'rollout.group_siz'; did you mean rollout.group_size? (known: ")
    assert "override" not in msg


def test_an_override_typo_blames_the_override(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  group_size: 4\n")
    msg = _error(path, ["train.lr=0.5", "rollout.group_siz=6"])
    assert msg.startswith("override `rollout.group_siz=6`: unknown config key 'rollout.group_siz'; "
                          "did you mean rollout.group_size?"), msg
    assert str(path) not in msg
    # a bad value, and a bad key inside a section the override set whole
    assert _error(path, ["rollout.group_size=many"]) == "override `rollout.group_size=many`: rollout.group_size: expected int, got 'many'"
    assert _error(path, ["rollout={group_siz: 3}"]).startswith(
        "override `rollout={group_siz: 3}`: unknown config key 'rollout.group_siz'; did you mean rollout.group_size?")
    # a bad value in the file itself stays the file's
    path.write_text("rollout:\n  group_size: many\n")
    assert _error(path, ["train.lr=0.5"]) == f"{path}: rollout.group_size: expected int, got 'many'"


def test_an_api_override_is_blamed_over_the_dict():
    with pytest.raises(ConfigError) as err:
        as_config({"train": {"lr": 0.5}}, ["train.stpes=3"])
    assert str(err.value).startswith("override `train.stpes=3`: unknown config key 'train.stpes'; did you mean train.steps?")


def test_cli_prints_one_line_blaming_the_override(capsys):
    assert main(["train", "configs/quickstart.yaml", "rollout.group_siz=4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "mmrlvr: error: override `rollout.group_siz=4`: unknown config key 'rollout.group_siz'; "
        "did you mean rollout.group_size?"), err
    assert "quickstart.yaml" not in err[0]


def test_a_near_miss_task_argument_is_named():
    from mmrlvr.checks.validate import config_errors

    errors = config_errors(load_config("configs/quickstart.yaml", ["task.args.max_redd=3", "task.args.zzz=1"]))
    assert [e for e in errors if e.startswith("task.args.max_redd=3:")] == [
        "task.args.max_redd=3: not an argument of task 'counting'; known: max_red, max_total, flaw_min, flaw_prob, "
        "eval_size, prompt_template, system_prompt (did you mean max_red?)"]
    assert [e for e in errors if e.startswith("task.args.zzz=1:")][0].endswith("system_prompt")  # nothing close: no guess
