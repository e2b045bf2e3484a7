"""A model directory whose pickled weights hold code is refused in one line naming what the pickle
would have called, and the code never runs (transformers and peft read `.bin` weights-only)."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from mmrlvr.cli import main
from mmrlvr.config import ConfigError, ModelConfig
from mmrlvr.models.load import load_policy
from mmrlvr.models.tiny import ensure_tiny


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture
def planted(tmp_path):
    d = tmp_path / "planted"
    shutil.copytree(ensure_tiny(), d)
    (d / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"model.embed_tokens.weight": _Planted(marker)}, d / "pytorch_model.bin")
    return d, marker


def test_load_policy_refuses_in_one_line(planted):
    d, marker = planted
    with pytest.raises(ConfigError) as err:
        load_policy(ModelConfig(path=str(d)))
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"model {str(d)!r}: refused to load its pickled weights")
    assert "(posix.system)" in line and not marker.exists()


def test_eval_of_a_planted_checkpoint_is_one_line_and_exit_2(planted, capsys):
    d, marker = planted
    assert main(["eval", "configs/quickstart.yaml", "--checkpoint", str(d), "--out", str(d.parent / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refused to load its pickled weights" in err[0] and not marker.exists()


def test_the_rollout_server_refuses_planted_weights_before_vllm_sees_them(planted, capsys):
    d, marker = planted
    assert main(["rollout-server", "--model", str(d), "--port", "9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: rollout-server: model ") and "(posix.system)" in err[0]
    assert not marker.exists()


def test_ordinary_pickled_weights_pass_the_check(tmp_path):
    from mmrlvr.models.load import pickled_weights_problem

    torch.save({"w": torch.ones(2, 3)}, tmp_path / "pytorch_model.bin")
    assert pickled_weights_problem(str(tmp_path)) is None and pickled_weights_problem("tiny") is None
