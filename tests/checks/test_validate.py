"""Every bad setting is one `mmrlvr: error:` line (key, value, what is allowed), exit 2,
before the model loads; and a good config passes untouched."""

import pytest

from mmrlvr.cli import main
from mmrlvr.config import ConfigError, load_config
from mmrlvr.checks.validate import RULES, config_errors, validate_config

BROKEN_PLUGIN = "def fn(completion, sample):\n    return 1.0\nraise RuntimeError('import-time failure')\n"

# (override, text the single error line must contain)
CASES = [
    ("rewards=[{verifier: no_such_verifier}]", "rewards[0].verifier='no_such_verifier': cannot be loaded (unknown verifier"),
    ("rewards=[{verifier: /no/such/file.py:fn}]", "rewards[0].verifier='/no/such/file.py:fn': cannot be loaded (verifier file"),
    ("rewards=[{verifier: {plugin}:missing}]", "has no function 'missing'"),
    ("rewards=[{verifier: {broken}:fn}]", "cannot be loaded (import-time failure)"),
    ("rewards=[{verifier: no_such_module_xyz:fn}]", "cannot be loaded (No module named 'no_such_module_xyz')"),
    ("rewards=[{verifier: count, weight: .nan}]", "rewards[0].weight=nan: expected a finite number"),
    ("rewards=[{verifier: count, weight: .inf}]", "rewards[0].weight=inf: expected a finite number"),
    ("algo.algorithm=ppo2", "algo.algorithm='ppo2': one of dapo, dr_grpo, grpo, gspo, reinforce_pp, rloo"),
    ("algo.advantage=gae", "algo.advantage='gae': one of dbb, dr_grpo, grpo, reinforce_pp, rloo"),
    ("algo.kl_kind=k4", "algo.kl_kind='k4': one of k1, k2, k3"),
    ("algo.aggregation=sum", "algo.aggregation='sum': one of token-mean"),
    ("algo.importance_level=word", "algo.importance_level='word': expected token or sequence"),
    ("algo.clip_low=1.5", "algo.clip_low=1.5: expected a number in [0, 1)"),
    ("algo.kl_coef=-0.1", "algo.kl_coef=-0.1: expected a finite number >= 0"),
    ("algo.ppo_epochs=0", "algo.ppo_epochs=0: expected an integer >= 1"),
    ("task.name=no_such_task", "task.name='no_such_task': a task module; known: "),
    ("task.max_bad_media_frac=1.5", "task.max_bad_media_frac=1.5: expected a fraction in [0, 1]"),
    ("task.args.max_blue=3", "task.args.max_blue=3: not an argument of task 'counting'; known: max_red"),
    ("task.args.eval_size=100", "task.args.eval_size=100: expected nothing, or task.eval_size (256)"),
    ("model.dtype=float64", "model.dtype='float64': expected one of float32, bfloat16, float16"),
    ("model.path=/no/such/model", "model.path='/no/such/model': 'tiny' (or 'tiny:<model_type>'), an existing local directory or a hub name"),
    ("model.path=runs/x/checkpoints/step_9", "model.path='runs/x/checkpoints/step_9': 'tiny' (or 'tiny:<model_type>'), an existing local"),
    ("model.path=tiny:blip", "model.path='tiny:blip': no tiny builder for 'blip'; known: tiny:qwen2_5_vl, tiny:qwen2_vl"),
    ("model.attn_implementation=flash", "model.attn_implementation='flash': expected one of sdpa, eager"),
    ("warm_start.checkpoint=/no/such/dir", "warm_start.checkpoint='/no/such/dir': an existing model directory"),
    ("train.steps=0", "train.steps=0: expected an integer >= 1"),
    ("temporal_contrast.method=shuffle", "temporal_contrast.method='shuffle': expected tgrpo or tgpo"),
    ("temporal_contrast.alpha=-0.3", "temporal_contrast.alpha=-0.3: expected a finite number >= 0"),
    ("temporal_contrast.shuffled_samples=0", "temporal_contrast.shuffled_samples=0: expected an integer >= 1"),
    ("model.video_max_frames=1", "model.video_max_frames=1: expected an integer >= 2"),
    ("rollout.group_size=1", "rollout.group_size=1: expected an integer >= 2 (an RL group of one gives no signal)"),
    ("rollout.prompts_per_step=0", "rollout.prompts_per_step=0: expected an integer >= 1"),
    ("train.lr=0", "train.lr=0.0: expected a finite number > 0"),
    ("train.lr=-1e-4", "train.lr=-0.0001: expected a finite number > 0"),
    ("train.lr=.nan", "train.lr=nan: expected a finite number > 0"),
    ("rollout.temperature=0", "rollout.temperature=0.0: expected a finite number > 0"),
    ("rollout.top_p=1.5", "rollout.top_p=1.5: expected a number in (0, 1]"),
    ("rollout.sampler=gumbel", "rollout.sampler='gumbel': expected inverse_cdf or multinomial"),
    ("threads=0", "threads=0: expected an integer >= 1"),
    ("rollout.max_new_tokens=0", "rollout.max_new_tokens=0: expected an integer >= 1"),
    ("verifier_timeout=-1", "verifier_timeout=-1.0: expected a finite number of seconds > 0"),
    ("verifier_timeout=.inf", "verifier_timeout=inf: expected a finite number of seconds > 0"),
    ("verifier_workers=-1", "verifier_workers=-1: expected an integer >= 0"),
    ("device=tpu", "device='tpu': expected one of auto, cpu, cuda"),
    ("eval.batch_size=0", "eval.batch_size=0: expected an integer >= 1"),
    ("output_dir={plugin}", "a directory (this is a file)"),
    ("output_dir=", "output_dir='': expected a non-empty path (the run directory)"),
    ("output_dir='  '", "output_dir='  ': expected a non-empty path (the run directory)"),
    ("output_dir=null", "output_dir: expected str, got null (this key has no unset value)"),
]


@pytest.fixture
def files(tmp_path):
    plugin = tmp_path / "ok_plugin.py"
    plugin.write_text("def fn(completion, sample):\n    return 1.0\n")
    broken = tmp_path / "broken_plugin.py"
    broken.write_text(BROKEN_PLUGIN)
    return {"plugin": str(plugin), "broken": str(broken)}


@pytest.fixture
def no_model(monkeypatch):
    """Any call past validation (threads, model, tasks) fails the test: errors must come first."""
    import mmrlvr.recipe.eval_cli as eval_cli
    import mmrlvr.recipe.loop as loop

    def too_late(*a, **k):
        raise AssertionError("validation let a bad config through to the heavy part")

    monkeypatch.setattr(loop, "set_threads_and_seed", too_late)
    monkeypatch.setattr(eval_cli, "set_threads_and_seed", too_late)


@pytest.mark.parametrize("override,expected", CASES, ids=[c[0][:40] for c in CASES])
def test_each_bad_setting_is_one_line_before_the_model_loads(override, expected, files, no_model, tmp_path, capsys):
    override = override.replace("{plugin}", files["plugin"]).replace("{broken}", files["broken"])
    args = ["configs/quickstart.yaml", f"output_dir={tmp_path / 'run'}", override]
    if override.startswith("output_dir"):
        args = args[:1] + args[2:]
    assert main(["train", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("mmrlvr: error: ") and expected in lines[0], lines[0]
    assert main(["eval", *args, "--checkpoint", str(tmp_path)]) == 2  # the eval path too
    assert expected in capsys.readouterr().err


def test_all_problems_are_listed_at_once(no_model, tmp_path, capsys):
    assert main(["train", "configs/quickstart.yaml", f"output_dir={tmp_path}", "train.steps=0", "threads=0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["mmrlvr: error: threads=0: expected an integer >= 1",
                   "mmrlvr: error: train.steps=0: expected an integer >= 1"]


def test_good_configs_pass(files, tmp_path):
    cfg = load_config("configs/quickstart.yaml", [f"output_dir={tmp_path / 'new' / 'run'}"])
    assert validate_config(cfg) is cfg
    ok = load_config(None, [f"rewards=[{{verifier: '{files['plugin']}:fn', weight: 0.5}}]",
                            "model.path=Qwen/Qwen2.5-VL-3B-Instruct", f"warm_start.checkpoint={tmp_path}",
                            "algo.algorithm=dapo", "algo.kl_coef=0.01", "rollout.group_size=2", "verifier_workers=0"])
    assert config_errors(ok) == []


def test_every_rule_names_a_real_key():
    from mmrlvr.checks.rules import METHOD_SETTINGS

    cfg = load_config(None)
    method_rules = [r for name in METHOD_SETTINGS.in_order() for r in METHOD_SETTINGS.get(name).rules]
    assert len(method_rules) >= 30  # the method folders' rules are checked too (30 keys moved there)
    for rule in [*RULES, *method_rules]:
        node = cfg
        for part in rule.key.split("."):
            assert hasattr(node, part), rule.key  # a typo in a rule would silently check nothing
            node = getattr(node, part)


@pytest.mark.parametrize("make", ["dir", "missing", "binary"])
def test_config_file_problems_are_one_line(make, tmp_path, capsys):
    path = tmp_path / "cfg.yaml"
    if make == "dir":
        path.mkdir()
    elif make == "binary":
        path.write_bytes(b"seed: \xff\xfe\n")
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mmrlvr: error: config {path}: "), err
    with pytest.raises(ConfigError):
        load_config(path)


def test_vllm_engine_without_vllm_is_one_line_before_the_model_loads(no_model, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    args = ["configs/quickstart.yaml", f"output_dir={tmp_path / 'run'}", "rollout.engine=vllm"]
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("mmrlvr: error: rollout.engine='vllm': expected an installed vLLM"), err
    assert main(["eval", *args, "--checkpoint", str(tmp_path)]) == 2
    assert "an installed vLLM" in capsys.readouterr().err
    # with vLLM importable the same config passes validation (the check asks for the package, nothing else)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    from mmrlvr.config import load_config
    from mmrlvr.checks.validate import config_errors

    assert config_errors(load_config("configs/quickstart.yaml", ["rollout.engine=vllm", f"output_dir={tmp_path}"])) == []
