"""The rollout server obeys only its trainer, in the main environment (no vLLM, no FastAPI): the key
checks and request limits are plain ASGI and Python, driven here through the ASGI protocol itself
(scope, receive, send) and the service's own endpoints' logic with a stand-in engine."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import stat
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from mmrlvr.rollout.server_guard import Guard, RequestLimits
from mmrlvr.rollout.server_key import authorized, bind_problem, server_key, write_key_file

ROOT = Path(__file__).resolve().parents[2]
KEY = "the-servers-key"


class Inner:
    """The app behind the guard: records what reached it, reads the body as an endpoint does."""

    def __init__(self):
        self.reached = []

    async def __call__(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.reached.append((scope["method"], scope["path"], len(body)))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _ask(app, method: str, path: str, headers: dict, chunks=(b"",)):
    """(status, JSON body) of one request through `app`, the body sent as `chunks`."""
    sent, parts = [], list(chunks)

    async def receive():
        chunk = parts.pop(0) if parts else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(parts)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body or b"null")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                                     {"Authorization": f"Basic {KEY}"}])
def test_a_post_without_the_key_is_401_and_never_reaches_an_endpoint(headers):
    inner = Inner()
    status, body = _ask(Guard(inner, KEY, 1000), "POST", "/update_weights", headers, [b'{"path": "/tmp/x"}'])
    assert status == 401 and "missing or wrong key" in body["detail"]
    assert inner.reached == []


def test_the_key_opens_posts_and_gets_stay_open():
    inner = Inner()
    guard = Guard(inner, KEY, 1000)
    assert _ask(guard, "POST", "/generate", {"Authorization": f"Bearer {KEY}"}, [b"{}"])[0] == 200
    assert _ask(guard, "GET", "/health", {})[0] == 200
    assert inner.reached == [("POST", "/generate", 2), ("GET", "/health", 0)]


def test_a_body_over_the_limit_is_413_by_its_length_before_it_is_read_or_once_streamed_past_it():
    inner = Inner()
    guard = Guard(inner, KEY, 1000)
    auth = {"Authorization": f"Bearer {KEY}"}

    def never():
        raise AssertionError("the body was read")

    status, body = _ask(guard, "POST", "/update_weights_upload", {**auth, "Content-Length": "400000000"}, [])
    assert status == 413 and body["detail"] == "body of 400000000 bytes is over this server's limit of 1000"
    status, body = _ask(guard, "POST", "/update_weights_upload", auth, [b"x" * 600, b"x" * 600, b"x" * 600])
    assert status == 413 and body["detail"] == "body passed this server's limit of 1000 bytes"
    assert inner.reached == []


def test_key_comparison_and_sources():
    assert authorized(f"Bearer {KEY}", KEY) and authorized(f"bearer {KEY}".encode(), KEY)
    assert not authorized(None, KEY) and not authorized("Bearer ", KEY) and not authorized(f"Bearer {KEY}x", KEY)
    assert server_key("given", {"MMRLVR_ROLLOUT_KEY": "env"}) == ("given", True)
    assert server_key(None, {"MMRLVR_ROLLOUT_KEY": "env"}) == ("env", True)
    key, explicit = server_key(None, {})
    assert not explicit and len(key) >= 40 and key != server_key(None, {})[0]


def test_a_generated_key_file_is_owner_only_even_over_an_open_file(tmp_path):
    path = tmp_path / "keys" / "server.key"
    path.parent.mkdir()
    path.write_text("old")
    os.chmod(path, 0o644)
    write_key_file("abc", path)
    assert path.read_text() == "abc\n" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_key_for_prints_where_a_generated_key_is_and_binding_beyond_loopback_needs_one(tmp_path, capsys, monkeypatch):
    from mmrlvr.config import ConfigError
    from mmrlvr.rollout.server_app import key_for

    monkeypatch.delenv("MMRLVR_ROLLOUT_KEY", raising=False)
    file = tmp_path / "k"
    key, written = key_for(Namespace(api_key=None, host="127.0.0.1", port=8000, key_file=str(file)))
    assert written == file and file.read_text() == key + "\n" and stat.S_IMODE(file.stat().st_mode) == 0o600
    assert f"secret written to {file} (owner-only)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--host 0.0.0.0 serves other machines: give the secret explicitly"):
        key_for(Namespace(api_key=None, host="0.0.0.0", port=8000, key_file=str(file)))
    assert key_for(Namespace(api_key="chosen", host="0.0.0.0", port=8000, key_file=None)) == ("chosen", None)
    err = capsys.readouterr().err
    assert "warning: listening on 0.0.0.0" in err and "secret written" not in err
    assert bind_problem("::1", False) is None


def test_the_cli_refuses_an_open_bind_without_a_chosen_key_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "MMRLVR_ROLLOUT_KEY"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "rollout-server", "--model", "tiny", "--host", "0.0.0.0"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mmrlvr: error: rollout-server: --host 0.0.0.0 serves other machines: give the secret explicitly "
        "(--api-key or MMRLVR_ROLLOUT_KEY) so the trainer there can be given the same one"]


# ---------------------------------------------------------------------------- per-request limits
class StandInEngine:
    """What `RolloutService` reads of `VLLMRolloutEngine`; `generate_raw` records that it ran."""

    allowed_ids, suppress_ids = list(range(10)), [10]

    def __init__(self):
        self.ran = 0

    def params_from_fields(self, fields):
        return fields

    def generate_raw(self, prompts, params):
        self.ran += 1
        return [[] for _ in prompts]


def _png(width: int, height: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (width, height)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


FIELDS = {"n": 2, "max_tokens": 8, "temperature": 1.0, "seed": 0}


@pytest.mark.parametrize("request_, fields, why", [
    ({"prompt": "p"}, {**FIELDS, "n": 3000}, "sampling.n=3000: expected an integer in [1, 64] (this server's limit)"),
    ({"prompt": "p"}, {**FIELDS, "max_tokens": 5000}, "sampling.max_tokens=5000: expected an integer in [1, 1024]"),
    ({"prompt": "p"}, {**FIELDS, "logits_processors": []}, "sampling: unknown fields ['logits_processors']"),
    ({"prompt": "p", "images": [_png(4, 4)] * 3}, FIELDS, "images in one prompt: 3 is more than this server's limit of 2"),
    ({"prompt": "p", "images": [_png(30, 20)]}, FIELDS, "an image of 30x20 pixels is over this server's limit of 500"),
])
def test_a_request_over_a_limit_is_refused_before_the_engine_runs(request_, fields, why):
    from mmrlvr.rollout.server_app import RolloutService

    engine = StandInEngine()
    service = RolloutService(engine, "tiny", "float32", limits=RequestLimits(max_tokens=1024, max_images=2, max_pixels=500))
    with pytest.raises(ValueError) as err:
        service.generate({"requests": [request_], "sampling": [fields]})
    assert str(err.value).startswith(why) and engine.ran == 0
    assert service.generate({"requests": [{"prompt": "p", "images": [_png(20, 20)]}], "sampling": [FIELDS]})["outputs"] == [[]]


def test_the_weight_channel_timeout_is_capped_by_the_server():
    limits = RequestLimits(max_timeout_s=3600)
    assert limits.timeout(600) == 600.0
    for bad in (1e7, 0, -1, float("nan"), "abc"):
        with pytest.raises(ValueError, match="timeout="):
            limits.timeout(bad)
