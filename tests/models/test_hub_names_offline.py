"""A hub name this machine cannot get (not in the local Hugging Face cache, and offline or the hub
not answering) is one `model.path=...` line at validation, in seconds, not a minute of the loader's
retries and a 91-line traceback. A cached one passes without touching the network.

The hub is made unreachable for real: HF_HUB_OFFLINE=1, or HF_ENDPOINT pointed at a local port
nothing listens on (the connection is refused at once)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mmrlvr.models.model_dir import hub_problem

ROOT = Path(__file__).resolve().parents[2]
NAME = "nobody-here/Not-Cached-VL"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache of the test's own."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def _cache_config(cache: Path, name: str) -> None:
    """What a finished download leaves: refs/main naming a snapshot that holds config.json."""
    repo = cache / f"models--{name.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")


def test_offline_and_not_cached_is_one_line(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_problem(NAME) == (
        f"expected a model this machine can get: it is not in the local Hugging Face cache ({hub_cache}) and "
        "HF_HUB_OFFLINE=1 forbids a download; download it where there is a network, or point model.path at a "
        "local directory")


def test_a_cached_name_passes_offline(hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _cache_config(hub_cache, NAME)
    assert hub_problem(NAME) is None


def test_a_hub_that_does_not_answer_is_named(hub_cache, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        constants.ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}")
    why = hub_problem(NAME)
    assert why is not None and why.startswith(
        f"expected a model this machine can get: it is not in the local Hugging Face cache ({hub_cache}) and the "
        "hub does not answer ("), why
    assert why.endswith("); download it where there is a network, or point model.path at a local directory")


def test_cli_train_offline_is_one_line_and_exit_2(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_HUB_CACHE": str(tmp_path / "hub")}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml",
                           f"model.path={NAME}", f"output_dir={run}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"mmrlvr: error: model.path='{NAME}': expected a model this machine can get: it is not in the local "
        f"Hugging Face cache ({tmp_path / 'hub'}) and HF_HUB_OFFLINE=1 forbids a download; download it where "
        "there is a network, or point model.path at a local directory"]
    assert not run.exists()


def test_the_loader_itself_says_one_line_offline(tmp_path):
    """Where no validation ran first (`mmrlvr eval --checkpoint NAME` loads what it is given), the
    loader's own offline failure is one line too, not the hub client's traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_HUB_CACHE": str(tmp_path / "hub")}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "eval", "configs/quickstart.yaml", "--checkpoint", NAME,
                           "task.eval_size=4"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"mmrlvr: error: model '{NAME}' cannot be loaded ("), proc.stderr
