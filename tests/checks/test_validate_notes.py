"""Temporal contrast under grpo with a right/wrong reward changes no advantage: one warning line."""

import pytest
import torch

from mmrlvr.algos.advantages import estimate
from mmrlvr.config import load_config
from mmrlvr.checks.notes import config_warnings
from mmrlvr.methods.temporal_contrast.maths import tgpo_bonus, tgrpo_bonus

VIDEO = ["task.name=video_motion", "temporal_contrast.enabled=true"]
LINE = ("temporal_contrast.method=tgrpo with algo.advantage=grpo and a right/wrong reward (choice): the bonus "
        "scales each group's rewards by one factor, which grpo's division by the group's std removes (up to its "
        "1e-6 eps), so it changes no advantage; set algo.advantage=dr_grpo (as "
        "configs/video_motion_contrast_tiny.yaml does) or turn temporal_contrast off")


@pytest.mark.parametrize("fn", [tgrpo_bonus, tgpo_bonus])
def test_the_bonus_cancels_under_grpo_on_a_binary_reward_and_not_under_dr_grpo(fn):
    ordered = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    shuffled = torch.tensor([[0.0, 0.0], [1.0, 0.0]])  # ordered acc .5 / .75 beat shuffled 0 / .5: both gated on
    bonus = fn(ordered, shuffled, alpha=0.3, mu=1.0)
    assert bonus.sum() > 0
    assert torch.allclose(estimate("grpo", ordered + bonus), estimate("grpo", ordered), atol=1e-5)
    assert not torch.allclose(estimate("dr_grpo", ordered + bonus), estimate("dr_grpo", ordered), atol=1e-3)


def test_one_warning_line_where_it_cancels():
    assert list(config_warnings(load_config(None, VIDEO))) == [LINE]  # video_motion: each sample's own `choice`
    assert list(config_warnings(load_config(None, VIDEO + ["algo.algorithm=dapo"]))) == [LINE]  # dapo's grpo
    one = load_config(None, VIDEO + ["temporal_contrast.method=tgpo", "rewards=[{verifier: exact, weight: 2.0}]"])
    assert list(config_warnings(one)) == [LINE.replace("tgrpo", "tgpo").replace("(choice)", "(exact)")]


@pytest.mark.parametrize("extra", [
    ["algo.advantage=dr_grpo"],  # no std division: the bonus stays
    ["temporal_contrast.enabled=false"],
    ["task.name=temporal_grounding"],  # tiou: partial credit, not one factor
    ["rewards=[{verifier: choice, weight: 1.0}, {verifier: format, weight: 0.5}]"],  # the sum is not right/wrong
    ["rewards=[{verifier: order, weight: 1.0}]"],
    ["sample_efficiency.dbb.enabled=true"],  # DBB's advantages replace grpo's
])
def test_no_warning_where_the_bonus_matters(extra):
    assert list(config_warnings(load_config(None, VIDEO + extra))) == []


def test_training_prints_the_warning_before_the_model_loads(monkeypatch, capsys, tmp_path):
    import mmrlvr.recipe.loop as loop

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop  # the run directory is claimed before any data or model is loaded

    monkeypatch.setattr(loop, "claim_run_dir", stop)
    cfg = load_config("configs/video_motion_contrast_tiny.yaml", ["algo.advantage=grpo", f"output_dir={tmp_path / 'r'}"])
    with pytest.raises(Stop):
        loop.train(cfg)
    assert capsys.readouterr().err == f"mmrlvr: warning: {LINE}\n"


DBB_LINE = ("algo.advantage=rloo with sample_efficiency.dbb.enabled=true: the advantages are DBB's (its per-prompt "
            "baseline replaces rloo, as documented); set algo.advantage=dbb (the same as the enabled switch) or "
            "sample_efficiency.dbb.enabled=false to train with rloo")


def test_an_advantage_named_besides_the_dbb_switch_gets_a_note():
    on = ["sample_efficiency.dbb.enabled=true"]
    assert list(config_warnings(load_config(None, on + ["algo.advantage=rloo"]))) == [DBB_LINE]
    # no conflict: dbb named, the preset's estimator (not named), or DBB off
    for extra in (["algo.advantage=dbb"], ["algo.algorithm=rloo"], []):
        assert list(config_warnings(load_config(None, on + extra))) == [], extra
    assert list(config_warnings(load_config(None, ["algo.advantage=rloo"]))) == []
    assert list(config_warnings(load_config(None, ["algo.advantage=dbb"]))) == []


def test_training_prints_the_dbb_note_though_the_run_reads_the_resolved_config(monkeypatch, capsys, tmp_path):
    """Resolving makes algo.advantage dbb: the note is of the config as written."""
    import mmrlvr.recipe.loop as loop

    class Stop(Exception):
        pass

    seen = []

    def stop(run_dir, cfg, is_main=True):
        seen.append(cfg.algo.advantage)
        raise Stop

    monkeypatch.setattr(loop, "claim_run_dir", stop)
    cfg = load_config("configs/quickstart.yaml", ["sample_efficiency.dbb.enabled=true", "algo.advantage=rloo",
                                                  f"output_dir={tmp_path / 'r'}"])
    with pytest.raises(Stop):
        loop.train(cfg)
    assert seen == ["dbb"] and capsys.readouterr().err == f"mmrlvr: warning: {DBB_LINE}\n"
