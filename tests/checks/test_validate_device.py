"""A device that is not there is an error: `device=cuda` where torch sees no CUDA device is one
`mmrlvr: error:` line and exit 2 before the model loads (CLI and Python API), never a CPU run under
a config that says cuda. Judged on this machine as it is: skipped where CUDA is present."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mmrlvr.config import ConfigError, load_config
from mmrlvr.checks.validate import config_errors, validate_config

ROOT = Path(__file__).resolve().parents[2]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="judges a machine without CUDA")
PREFIX = f"device=cuda but torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False: "


@no_cuda
def test_cli_train_with_cuda_missing_is_one_line_and_exit_2(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", "device=cuda",
                           f"output_dir={run}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mmrlvr: error: {PREFIX}"), proc.stderr
    assert not run.exists()  # refused before the run directory (and the model) was touched


@no_cuda
def test_python_api_with_cuda_missing_raises_before_anything_is_written(tmp_path, monkeypatch):
    import mmrlvr

    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as info:
        mmrlvr.run("configs/quickstart.yaml", overrides=["device=cuda", f"output_dir={run}"])
    assert str(info.value).startswith(PREFIX) and "\n" not in str(info.value)
    assert not run.exists()


@no_cuda
def test_a_cuda_config_stays_valid_as_a_config(tmp_path, monkeypatch):
    """`mmrlvr plan` and the docs' checks judge configs written for GPUs on any machine: only the
    run's own validation (this machine included) refuses them."""
    monkeypatch.chdir(ROOT)
    cfg = load_config("configs/quickstart.yaml", ["device=cuda", f"output_dir={tmp_path}"])
    assert config_errors(cfg) == []
    assert [e[:len(PREFIX)] for e in config_errors(cfg, machine=True)] == [PREFIX]
    with pytest.raises(ConfigError):
        validate_config(cfg)
    cfg.device = "auto"
    assert validate_config(cfg) is cfg


QWEN3B = "Qwen/Qwen2.5-VL-3B-Instruct"  # 3,754,622,976 parameters (its shipped config; nothing downloaded)


@no_cuda
def test_auto_on_the_cpu_warns_for_a_model_of_several_gb():
    from mmrlvr.train.preflight import cpu_fallback_note

    note = cpu_fallback_note(load_config(None, [f"model.path={QWEN3B}"]))
    # 3,754,622,976 x 4 bytes (float32) = 15.0 GB > 3 GB
    assert note == (f"device=auto and torch {torch.__version__} sees no CUDA device: training {QWEN3B} "
                    "(3.8 B parameters, 15.0 GB of float32 weights) on the CPU; set device=cuda to stop instead")
    assert "7.5 GB of bfloat16 weights" in cpu_fallback_note(load_config(None, [f"model.path={QWEN3B}", "model.dtype=bfloat16"]))
    assert cpu_fallback_note(load_config(None, ["model.path=tiny"])) is None  # a few MB: the CPU is its place
    assert cpu_fallback_note(load_config(None, [f"model.path={QWEN3B}", "device=cpu"])) is None  # asked for


@no_cuda
def test_training_prints_the_cpu_warning_once_before_the_model_loads(monkeypatch, capsys, tmp_path, cached_qwen3b):
    import mmrlvr.recipe.loop as loop

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop  # the run directory is claimed after the warnings, before any data or model loads

    monkeypatch.setattr(loop, "claim_run_dir", stop)
    monkeypatch.chdir(ROOT)
    cfg = load_config("configs/quickstart.yaml", [f"model.path={QWEN3B}", f"output_dir={tmp_path / 'r'}"])
    with pytest.raises(Stop):
        loop.train(cfg)
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "sees no CUDA device" in line] == [
        f"mmrlvr: warning: device=auto and torch {torch.__version__} sees no CUDA device: training {QWEN3B} "
        "(3.8 B parameters, 15.0 GB of float32 weights) on the CPU; set device=cuda to stop instead"]
