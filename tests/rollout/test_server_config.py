"""The rollout-server settings, checked in the main environment (no vLLM): addresses, the start-up
probe, and the options that only make sense with a server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mmrlvr.config import Config, RolloutConfig
from mmrlvr.checks.validate import config_errors

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_lines(**rollout) -> list[str]:
    cfg = Config(rollout=RolloutConfig(**rollout))
    return [e for e in config_errors(cfg) if e.startswith("rollout.")]


def test_unreachable_server_is_one_line_and_a_nonzero_exit_before_the_model_loads(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml",
                           "rollout.engine=vllm_server", f"rollout.server_url={url}", f"output_dir={run}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 60
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mmrlvr: error:")]
    assert errors == [f"mmrlvr: error: rollout.server_url={url!r}: expected a running rollout server "
                      "(GET /health: connection refused); start one with `mmrlvr rollout-server --model DIR --port N`"]
    assert "Traceback" not in proc.stderr
    assert not run.exists()  # refused before the run directory (and the model) was touched


def test_missing_and_malformed_addresses():
    assert _server_lines(engine="vllm_server") == [
        "rollout.server_url=None: expected the rollout server's address, e.g. http://127.0.0.1:8000 "
        "(start one with `mmrlvr rollout-server --model DIR --port 8000`)"]
    assert _server_lines(engine="vllm_server", server_url="127.0.0.1:8000") == [
        "rollout.server_url='127.0.0.1:8000': expected an address such as http://127.0.0.1:8000 (scheme http or https, a host)"]
    assert _server_lines(engine="vllm_server", server_url="http://h:80x") == [
        "rollout.server_url='http://h:80x': expected a port number after the host, e.g. http://127.0.0.1:8000"]
    assert _server_lines(engine="vllm_server", server_url="http://h:8000/generate") == [
        "rollout.server_url='http://h:8000/generate': expected no path or query after host:port"]


def test_async_steps_and_timeout_values():
    assert _server_lines(async_steps=1) == [
        "rollout.async_steps=1: expected 0 with rollout.engine=hf (asynchronous rollouts need rollout.engine=vllm_server)"]
    assert _server_lines(async_steps=2) == ["rollout.async_steps=2: expected 0 (synchronous) or 1 (one step off-policy)"]
    assert _server_lines(async_steps=True) == ["rollout.async_steps=True: expected 0 (synchronous) or 1 (one step off-policy)"]
    assert _server_lines(server_timeout=0) == ["rollout.server_timeout=0: expected a finite number of seconds > 0"]
    assert _server_lines(server_timeout=1e10) == [
        "rollout.server_timeout=10000000000.0: expected at most 86400 seconds (a day: one request's whole deadline, "
        "connect to last byte)"]
    assert _server_lines(server_timeout=86400) == []
    assert _server_lines(server_key="  ") == [
        "rollout.server_key='  ': expected the rollout server's key (text), or null for MMRLVR_ROLLOUT_KEY"]
    assert _server_lines(weight_sync="nccl") == [
        "rollout.weight_sync='nccl': expected auto, file, upload or broadcast"]
    assert _server_lines(engine="vllm_sever") == ["rollout.engine='vllm_sever': expected hf, vllm or vllm_server"]
    assert _server_lines() == []


class _Other(BaseHTTPRequestHandler):
    """Some other web service on the port: answers /health, but not as a rollout server."""

    def do_GET(self):  # noqa: N802
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_another_service_on_the_port_is_not_taken_for_a_rollout_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Other)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        assert _server_lines(engine="vllm_server", server_url=url) == [
            f"rollout.server_url={url!r}: answers GET /health but is not a rollout server "
            "(expected 'mmrlvr-rollout-server', got None)"]
    finally:
        srv.shutdown()


def test_rollout_correction_defaults_to_token_tis_with_the_server():
    from mmrlvr.checks.resolve import resolve_config

    for engine, want in (("hf", "none"), ("vllm", "token_tis"), ("vllm_server", "token_tis")):
        cfg = resolve_config(Config(rollout=RolloutConfig(engine=engine, server_url="http://127.0.0.1:1")))
        assert cfg.algo.rollout_correction == want, engine


def test_async_rollouts_without_a_correction_are_refused():
    """One step off-policy with the lag left unweighted would train as if on-policy: refused; the
    server's default (token_tis) and any explicit correction pass."""
    cfg = Config(rollout=RolloutConfig(engine="vllm_server", server_url="http://127.0.0.1:1", async_steps=1))
    cfg.algo.rollout_correction = "none"
    lines = [e for e in config_errors(cfg) if e.startswith("algo.")]
    assert lines == ["algo.rollout_correction='none': expected a correction (e.g. token_tis, the default with a "
                     "rollout server) with rollout.async_steps=1: asynchronous rollouts are one step off-policy"]
    for mode in (None, "token_tis", "seq_mis"):
        cfg.algo.rollout_correction = mode
        assert [e for e in config_errors(cfg) if e.startswith("algo.")] == []
    cfg.algo.rollout_correction, cfg.rollout.async_steps = "none", 0
    assert [e for e in config_errors(cfg) if e.startswith("algo.")] == []


def test_the_servers_key_never_lands_in_the_run_directory(tmp_path):
    from mmrlvr.config import save_config

    save_config(Config(rollout=RolloutConfig(server_key="s3cret-key")), tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert "s3cret-key" not in text and "server_key: null" in text
