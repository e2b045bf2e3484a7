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
from mmrlvr.config.validate import config_errors, validate_config

ROOT = Path(__file__).resolve().parents[1]
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
