"""A device that is not there is an error: `device=cuda` where torch sees no CUDA device is one
`mmrlvr: error:` line and exit 2 before the model loads (CLI and Python API), never a CPU run under
a config that says cuda; nor is `device=auto` under a launch that asked for GPUs (accelerate's
GPU launcher), on every rank, while CPU launches train as before. Judged on this machine as it is:
skipped where CUDA is present."""

from __future__ import annotations

import json
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


# what each launcher puts in its ranks' environment (accelerate 1.16 / torch 2.14, read from real launches)
ACCELERATE_GPU_RANK = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DYNAMO_BACKEND": "NO", "RANK": "1",
                       "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
ACCELERATE_CPU = {"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no", "MASTER_ADDR": "127.0.0.1"}
TORCHRUN_RANK = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
LAUNCH_ASK = ("the launch asks for GPUs (accelerate launch --multi_gpu or distributed_type: MULTI_GPU, "
              "2 processes, ACCELERATE_USE_CPU unset)")
LAUNCH_PREFIX = f"device=auto but {LAUNCH_ASK} and torch {torch.__version__} sees no CUDA device"
LAUNCH_ADVICE = ("to run on the CPU set device=cpu, or launch with accelerate launch --cpu (one process) "
                 "or torchrun --nproc_per_node N (gloo)")


def test_which_launches_ask_for_gpus():
    from mmrlvr.checks.bounds import gpu_launch

    assert gpu_launch(ACCELERATE_GPU_RANK) == LAUNCH_ASK
    assert gpu_launch({**ACCELERATE_GPU_RANK, "ACCELERATE_USE_CPU": "True"}) is None
    assert gpu_launch(ACCELERATE_CPU) is None  # `accelerate launch --cpu`: the CPU, asked for
    assert gpu_launch({**ACCELERATE_CPU, "ACCELERATE_USE_CPU": "False"}) is None  # one process, no launcher's request
    assert gpu_launch(TORCHRUN_RANK) is None  # torchrun says nothing about the device (the gloo tests)
    assert gpu_launch({**ACCELERATE_GPU_RANK, "ACCELERATE_USE_FSDP": "true"}) is None  # the sharding check's
    assert gpu_launch({}) is None


@no_cuda
def test_auto_under_a_gpu_launch_is_one_line_only_for_auto():
    from mmrlvr.checks.bounds import check_launch_device

    cfg = load_config(None, ["model.path=tiny"])
    [line] = check_launch_device(cfg, ACCELERATE_GPU_RANK)
    assert line.startswith(LAUNCH_PREFIX + " (torch.cuda.is_available() is False: ") and line.endswith(LAUNCH_ADVICE)
    assert list(check_launch_device(cfg, TORCHRUN_RANK)) == []
    cfg.device = "cpu"  # asked for the CPU: gloo under the GPU launcher, as before
    assert list(check_launch_device(cfg, ACCELERATE_GPU_RANK)) == []
    cfg.device = "cuda"  # check_device's own line, not two about one thing
    assert list(check_launch_device(cfg, ACCELERATE_GPU_RANK)) == []


def _accelerate(launch: list[str], run: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launch, "--main_process_port", "0",
           "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", "train.steps=1", "warm_start.steps=0",
           "task.train_size=64", "task.eval_size=8", f"output_dir={run}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


@no_cuda
def test_multi_gpu_launch_without_cuda_stops_every_rank_before_the_model_loads(tmp_path):
    run = tmp_path / "run"
    proc = _accelerate(["--multi_gpu", "--num_processes", "2"], run)
    assert proc.returncode != 0  # the launcher's own status; each rank's is 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mmrlvr: error:")]
    # one line per rank that got to print it (the launcher may stop the second once the first is out)
    assert 1 <= len(errors) <= 2 and len(set(errors)) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"mmrlvr: error: {LAUNCH_PREFIX}") and errors[0].endswith(LAUNCH_ADVICE)
    assert "exitcode  : 2" in proc.stderr and "exitcode  : 1" not in proc.stderr
    assert proc.stderr.count("Traceback (most recent call last)") == 1  # the launcher's; no rank's
    assert not run.exists()  # refused before the run directory (and the model) was touched


@no_cuda
@pytest.mark.parametrize("launch, overrides", [
    (["--cpu", "--num_processes", "2"], []),  # the CPU launcher: as before
    (["--multi_gpu", "--num_processes", "2"], ["device=cpu"]),  # the refusal's advice: two gloo ranks
], ids=["cpu-launcher", "multi-gpu-device-cpu"])
def test_cpu_launches_still_train(tmp_path, launch, overrides):
    proc = _accelerate(launch, tmp_path / "run", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["eval_after"]["n"] == 8
