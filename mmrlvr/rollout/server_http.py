"""The rollout server's client side of the wire: address checks, the start-up probe, JSON requests.

Standard library only (urllib): the training environment talks to a `mmrlvr rollout-server`
without vLLM, FastAPI or requests installed. Every failure (refused, timed out, a server that
died, an answer that is not the server's JSON) becomes one `RolloutServerError` line naming the
address and what was asked.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is reached directly, never via http_proxy
SERVER_NAME = "mmrlvr-rollout-server"  # what GET /health answers, so another service on the port is told apart


class RolloutServerError(RuntimeError):
    """The rollout server cannot be used: one line naming its address and the request."""


def url_problem(url) -> str | None:
    """Why `url` is not a usable server address (None: it is): http(s)://host:port, nothing else."""
    if not isinstance(url, str) or not url.strip():
        return "expected an address such as http://127.0.0.1:8000"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an address such as http://127.0.0.1:8000 (scheme http or https, a host)"
    try:
        parts.port
    except ValueError:
        return "expected a port number after the host, e.g. http://127.0.0.1:8000"
    if parts.path not in ("", "/") or parts.query:
        return "expected no path or query after host:port"
    return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        body = exc.read().decode("utf-8", "replace").strip().splitlines()
        detail = body[0][:300] if body else ""
        return f"HTTP {exc.code}{': ' + detail if detail else ''}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "no answer in time"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or type(exc).__name__ == "RemoteDisconnected":
        return "connection lost: the server went away"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def call(url: str, path: str, payload: dict | None = None, *, timeout: float, data: bytes | None = None) -> dict:
    """GET (no payload) or POST JSON to `url + path`; the decoded JSON object, else one-line RolloutServerError.

    `data` posts raw bytes (a weights file) instead of JSON."""
    full = url.rstrip("/") + path
    body = data if data is not None else (json.dumps(payload).encode() if payload is not None else None)
    headers = {"Content-Type": "application/octet-stream" if data is not None else "application/json; charset=utf-8"}
    req = urllib.request.Request(full, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            raw = resp.read()
    except (OSError, ValueError, urllib.error.HTTPError) as exc:  # URLError, refused, reset, timeout
        verb = "POST" if body is not None else "GET"
        raise RolloutServerError(f"rollout server {url}: {verb} {path} failed ({_why(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - http.client's RemoteDisconnected/IncompleteRead on a dying server
        raise RolloutServerError(f"rollout server {url}: {path} failed ({_why(exc)})") from None
    try:
        out = json.loads(raw)
    except ValueError:
        raise RolloutServerError(f"rollout server {url}: {path} answered {len(raw)} bytes that are not JSON") from None
    if not isinstance(out, dict):
        raise RolloutServerError(f"rollout server {url}: {path} answered a {type(out).__name__}, not a JSON object")
    return out


def probe_problem(url: str, timeout: float = 10.0) -> str | None:
    """Why the server at `url` cannot be used now (None: it answers as a rollout server)."""
    try:
        info = call(url, "/health", timeout=timeout)
    except RolloutServerError as exc:
        why = str(exc).split(" failed (", 1)[-1].rstrip(")")
        return (f"expected a running rollout server (GET /health: {why}); start one with "
                "`mmrlvr rollout-server --model DIR --port N`")
    if info.get("server") != SERVER_NAME:
        return f"answers GET /health but is not a rollout server (expected {SERVER_NAME!r}, got {info.get('server')!r})"
    return None
