import pytest

from mmrlvr.config import ConfigError, load_config


def test_yaml_and_dotted_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("seed: 3\ntrain:\n  lr: 1.0e-4\nrollout:\n  group_size: 4\n")
    cfg = load_config(path, ["train.lr=5e-5", "algo.algorithm=dapo", "task.args.max_red=3", "rewards=[{verifier: count, weight: 2}]"])
    assert cfg.seed == 3
    assert cfg.train.lr == pytest.approx(5e-5)
    assert cfg.rollout.group_size == 4
    assert cfg.algo.algorithm == "dapo"
    assert cfg.task.args == {"max_red": 3}
    assert cfg.rewards[0].verifier == "count" and cfg.rewards[0].weight == 2.0
    assert cfg.train.steps == 100  # untouched default


def test_unknown_key_names_the_key_and_the_known_ones(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lrr: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert "unknown config key 'train.lrr'" in msg
    assert "lr" in msg and "steps" in msg and str(path) in msg


def test_unknown_override_and_bad_type():
    with pytest.raises(ConfigError, match="unknown config key 'nope'"):
        load_config(None, ["nope=1"])
    with pytest.raises(ConfigError, match="rollout.group_size: expected int"):
        load_config(None, ["rollout.group_size=many"])
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(None, ["train.lr"])


def test_quickstart_config_loads():
    cfg = load_config("configs/quickstart.yaml")
    assert cfg.model.path == "tiny" and cfg.algo.algorithm == "grpo"
    assert cfg.task.eval_size >= 200


def test_a_null_section_is_its_defaults_and_a_null_scalar_without_unset_is_one_line():
    """`rollout:` with nothing under it parses as null: the section's defaults, not an
    AttributeError after the model loads; `task.args=null` an empty mapping; `train.steps=null`
    (no unset value) one line naming the key."""
    from mmrlvr.config import ConfigError, RolloutConfig, TrainConfig, load_config

    cfg = load_config("configs/quickstart.yaml", ["rollout=null", "task.args=null"])
    assert cfg.rollout == RolloutConfig() and cfg.task.args == {}
    assert load_config("configs/quickstart.yaml", ["train=null"]).train == TrainConfig()
    with pytest.raises(ConfigError, match=r"train\.steps: expected int, got null"):
        load_config("configs/quickstart.yaml", ["train.steps=null"])
    assert load_config("configs/quickstart.yaml", ["rollout.generate_max_rows=null"]).rollout.generate_max_rows is None
