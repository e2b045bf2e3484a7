"""The sample-efficiency settings: each bad value is one `mmrlvr: error:` line before the model
loads; good ones pass; the YAML section round-trips."""

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config, save_config
from mmrlvr.config.efficiency import max_reward
from mmrlvr.checks.validate import config_errors

SE = "sample_efficiency"
CASES = [
    (f"{SE}.replay.fraction=1.5", f"{SE}.replay.fraction=1.5: expected a number in [0, 1]"),
    (f"{SE}.replay.cooldown=-1", f"{SE}.replay.cooldown=-1: expected an integer >= 0 (steps)"),
    (f"{SE}.replay.max_reuse=0", f"{SE}.replay.max_reuse=0: expected an integer >= 1"),
    (f"{SE}.replay.min_pass_rate=-0.1", f"{SE}.replay.min_pass_rate=-0.1: expected a number in [0, 1]"),
    (f"{SE}.replay.max_pass_rate=1.2", f"{SE}.replay.max_pass_rate=1.2: expected a number in [0, 1]"),
    (f"{SE}.dbb.lam=0", f"{SE}.dbb.lam=0.0: expected a number in (0, 1]"),
    (f"{SE}.dbb.eps=-1", f"{SE}.dbb.eps=-1.0: expected a finite number >= 0"),
    (f"{SE}.dbb.scale=mad", f"{SE}.dbb.scale='mad': expected std or none"),
    (f"{SE}.demos.p0=2", f"{SE}.demos.p0=2.0: expected a number in [0, 1]"),
    (f"{SE}.demos.anneal_steps=0", f"{SE}.demos.anneal_steps=0: expected an integer >= 1 (or null: train.steps)"),
    (f"{SE}.demos.k=0", f"{SE}.demos.k=0: expected an integer >= 1"),
    (f"{SE}.replay.cooldown=2.5", f"{SE}.replay.cooldown: expected int, got 2.5"),
]
# settings wrong only together
CROSS = [
    ([f"{SE}.replay.enabled=true", f"{SE}.replay.min_pass_rate=0.8"],
     f"{SE}.replay.min_pass_rate=0.8: expected <= {SE}.replay.max_pass_rate (0.7)"),
    # P = 3, fraction .3: min(floor(.9), 1) = 0 replays
    ([f"{SE}.replay.enabled=true", f"{SE}.replay.fraction=0.3", "rollout.prompts_per_step=3"],
     f"{SE}.replay.fraction=0.3: expected a share that leaves at least one replay in a batch of rollout.prompts_per_step=3"),
    ([f"{SE}.dbb.enabled=true", "rewards=[{verifier: count, weight: -0.5}]"],
     "rewards[0].weight=-0.5: expected >= 0 with sample_efficiency.dbb"),
    # DAPO's preset turns on both things DBB cannot work with; each is named once
    ([f"{SE}.dbb.enabled=true", "algo.algorithm=dapo", "algo.dynamic_sampling=false"],
     "algo.overlong_buffer=-1: expected 0 with sample_efficiency.dbb"),
    ([f"{SE}.dbb.enabled=true", "algo.algorithm=dapo", "algo.overlong_buffer=0"],
     "algo.dynamic_sampling=True: expected false with sample_efficiency.dbb"),
    # the estimator's name turns DBB on like the switch: the same refusals, naming algo.advantage=dbb
    (["algo.advantage=dbb", "rewards=[{verifier: count, weight: -0.5}]"],
     "rewards[0].weight=-0.5: expected >= 0 with algo.advantage=dbb"),
    (["algo.advantage=dbb", "algo.algorithm=dapo", "algo.dynamic_sampling=false"],
     "algo.overlong_buffer=-1: expected 0 with algo.advantage=dbb"),
    (["algo.advantage=dbb", "algo.algorithm=dapo", "algo.overlong_buffer=0"],
     "algo.dynamic_sampling=True: expected false with algo.advantage=dbb"),
    (["algo.advantage=dbb", "algo.overlong_buffer=16"], "algo.overlong_buffer=16: expected 0 with algo.advantage=dbb"),
]


@pytest.fixture
def no_model(monkeypatch):
    import mmrlvr.recipe.loop as loop

    def too_late(*a, **k):
        raise AssertionError("validation let a bad config through to the heavy part")

    monkeypatch.setattr(loop, "set_threads_and_seed", too_late)


@pytest.mark.parametrize("overrides,expected", [([o], e) for o, e in CASES] + CROSS,
                         ids=[c[0] for c in CASES] + [c[0][-1] for c in CROSS])
def test_each_bad_setting_is_one_line(overrides, expected, no_model, tmp_path, capsys):
    assert main(["train", "configs/quickstart.yaml", f"output_dir={tmp_path / 'run'}", *overrides]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mmrlvr: error: ") and expected in lines[0], lines


def test_dapo_refuses_dbb_named_either_way_with_the_same_two_lines():
    for switch, said in ((f"{SE}.dbb.enabled=true", f"{SE}.dbb"), ("algo.advantage=dbb", "algo.advantage=dbb")):
        errors = config_errors(load_config("configs/quickstart.yaml", [switch, "algo.algorithm=dapo"]))
        assert errors == [
            f"algo.overlong_buffer=-1: expected 0 with {said} (a length penalty leaves rewards outside [0, 1])",
            f"algo.dynamic_sampling=True: expected false with {said} (it drops the all-equal groups DBB learns from)"]


def test_resolving_makes_the_two_dbb_switches_agree():
    from mmrlvr.checks.resolve import resolve_config

    def resolved(*overrides):
        cfg = resolve_config(load_config(None, list(overrides)))
        return cfg.algo.advantage, cfg.sample_efficiency.dbb.enabled

    assert resolved("algo.advantage=dbb") == ("dbb", True)
    assert resolved(f"{SE}.dbb.enabled=true") == ("dbb", True)
    assert resolved(f"{SE}.dbb.enabled=true", "algo.algorithm=rloo") == ("dbb", True)  # the preset's rloo replaced
    assert resolved(f"{SE}.dbb.enabled=true", "algo.advantage=dr_grpo") == ("dbb", True)  # as documented (a note)
    assert resolved("algo.algorithm=rloo") == ("rloo", False) and resolved() == ("grpo", False)  # DBB off: untouched
    cfg = resolve_config(load_config(None, ["algo.advantage=dbb", f"{SE}.dbb.lam=0.5"]))
    assert resolve_config(cfg) == cfg and cfg.sample_efficiency.dbb.lam == 0.5  # settings kept, idempotent


def test_wired_methods_are_accepted(no_model, tmp_path):
    """Enabling a method is no longer an error: the run gets as far as the heavy part."""
    for switch in (f"{SE}.replay.enabled=true", f"{SE}.dbb.enabled=true", "algo.advantage=dbb", f"{SE}.demos.enabled=true"):
        with pytest.raises(AssertionError, match="validation let a bad config through"):
            main(["train", "configs/quickstart.yaml", f"output_dir={tmp_path}", switch])


def test_good_settings_pass_and_round_trip(tmp_path):
    on = [f"{SE}.replay.enabled=true", f"{SE}.replay.fraction=0.9", f"{SE}.replay.min_pass_rate=0.7",
          f"{SE}.dbb.enabled=true", f"{SE}.dbb.scale=none", f"{SE}.dbb.eps=1e-6", f"{SE}.demos.enabled=true",
          f"{SE}.demos.anneal_steps=40", "rollout.prompts_per_step=2", f"output_dir={tmp_path}"]
    cfg = load_config("configs/quickstart.yaml", on)
    assert config_errors(cfg) == []
    assert cfg.sample_efficiency.dbb.eps == 1e-6 and cfg.sample_efficiency.demos.anneal_steps == 40
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    # all off by default
    d = load_config(None).sample_efficiency
    assert not (d.replay.enabled or d.dbb.enabled or d.demos.enabled)


def test_max_reward():
    assert max_reward(load_config(None)) == 1.0  # each sample's own verifier, weight 1
    cfg = load_config(None, ["rewards=[{verifier: count, weight: 0.5}, {verifier: format, weight: 2}, "
                             "{verifier: count, weight: -1}]", "temporal_contrast.enabled=true",
                             "temporal_contrast.alpha=0.3"])
    # negative weights add nothing; the temporal-contrast bonus is not a verifier's reward
    assert max_reward(cfg) == pytest.approx(0.5 + 2)


def test_a_token_weighting_method_the_config_cannot_fill_is_refused_before_the_model_loads(monkeypatch):
    """A registered method with a setting `token_weighting` has no key for would raise at the first
    step's weighting, after the warm start: validation names it instead."""
    import torch

    from mmrlvr.algos import token_weights

    def uses_a_missing_key(signals, mask, made_up_top_k: int = 3) -> torch.Tensor:
        return mask.float()

    monkeypatch.setitem(token_weights.METHODS._items, "needs_made_up",
                        token_weights.Method(uses_a_missing_key, (), token_weights._params_record("needs_made_up",
                                                                                                   uses_a_missing_key)))
    errors = config_errors(load_config("configs/quickstart.yaml", ["token_weighting.method=needs_made_up"]))
    assert len(errors) == 1 and errors[0].startswith("token_weighting.method='needs_made_up'"), errors
    assert "made_up_top_k" in errors[0]
    assert config_errors(load_config("configs/quickstart.yaml", ["token_weighting.method=vppo"])) == []
