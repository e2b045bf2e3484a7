"""The rollout server's client side of the wire: address checks, the start-up probe, JSON requests.

Standard library only (urllib): the training environment talks to a `mmrlvr rollout-server`
without vLLM, FastAPI or requests installed. Every failure (refused, timed out, a server that
died, an answer that is not the server's JSON) becomes one `RolloutServerError` line naming the
address and what was asked.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse

from mmrlvr.rollout.server_key import ENV as KEY_ENV, auth_header, client_key

# http.client, not urllib: the server is reached directly (never via http_proxy) and the whole
# request has one deadline
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


class _Deadline(Exception):
    """The request's whole deadline passed (however the server dribbled its answer)."""


def _fetch(full: str, method: str, body: bytes | None, headers: dict, timeout: float) -> bytes:
    """One HTTP exchange that ends by `timeout` seconds from now, whatever the server does.

    A socket timeout bounds each read only: a server sending a byte every few seconds would keep
    the trainer waiting forever. So each read gets the time that is left, and a timer shuts the
    socket at the deadline (unblocking a read in progress)."""
    parts = urllib.parse.urlsplit(full)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    deadline = time.monotonic() + timeout
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    expired = threading.Event()

    def expire():
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
        resp = conn.getresponse()
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Deadline()
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(1 << 20) if hasattr(resp, "read1") else resp.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        if expired.is_set():
            raise _Deadline()
        raw = b"".join(chunks)
        if resp.status >= 400:
            lines = raw.decode("utf-8", "replace").strip().splitlines()
            raise _Status(resp.status, lines[0][:300] if lines else "")
        return raw
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise _Deadline() from None
        raise
    finally:
        timer.cancel()
        conn.close()


class _Status(Exception):
    def __init__(self, code: int, detail: str):
        super().__init__(code, detail)
        self.code, self.detail = code, detail


def call(url: str, path: str, payload: dict | None = None, *, timeout: float, data: bytes | None = None,
         key: str | None = None) -> dict:
    """GET (no payload) or POST JSON to `url + path`; the decoded JSON object, else one-line RolloutServerError.

    `data` posts raw bytes (a weights file) instead of JSON; `key` is sent as `Authorization: Bearer`.
    `timeout` is the whole request's deadline (connect, send, wait, read), not each read's."""
    full = url.rstrip("/") + path
    body = data if data is not None else (json.dumps(payload).encode() if payload is not None else None)
    headers = {"Content-Type": "application/octet-stream" if data is not None else "application/json; charset=utf-8",
               **auth_header(key)}
    verb = "POST" if body is not None else "GET"
    try:
        raw = _fetch(full, verb, body, headers, timeout)
    except _Deadline:
        raise RolloutServerError(f"rollout server {url}: {verb} {path} failed (no answer in time)") from None
    except _Status as exc:
        hint = ("; the server's key is in the file it printed at start: give it as rollout.server_key or "
                f"{KEY_ENV}" if exc.code == 401 else "")
        detail = f": {exc.detail}" if exc.detail else ""
        raise RolloutServerError(f"rollout server {url}: {verb} {path} failed (HTTP {exc.code}{detail}){hint}") from None
    except Exception as exc:  # noqa: BLE001 - refused, reset, timed out, http.client's RemoteDisconnected/IncompleteRead
        raise RolloutServerError(f"rollout server {url}: {verb} {path} failed ({_why(exc)})") from None
    try:
        out = json.loads(raw)
    except ValueError:
        raise RolloutServerError(f"rollout server {url}: {path} answered {len(raw)} bytes that are not JSON") from None
    if not isinstance(out, dict):
        raise RolloutServerError(f"rollout server {url}: {path} answered a {type(out).__name__}, not a JSON object")
    return out


def probe_problem(url: str, timeout: float = 10.0, key: str | None = None) -> str | None:
    """Why the server at `url` cannot be used now (None: it answers as a rollout server and takes `key`,
    else MMRLVR_ROLLOUT_KEY)."""
    key = client_key(key)
    try:
        info = call(url, "/health", timeout=timeout)
    except RolloutServerError as exc:
        why = str(exc).split(" failed (", 1)[-1].rstrip(")")
        return (f"expected a running rollout server (GET /health: {why}); start one with "
                "`mmrlvr rollout-server --model DIR --port N`")
    if info.get("server") != SERVER_NAME:
        return f"answers GET /health but is not a rollout server (expected {SERVER_NAME!r}, got {info.get('server')!r})"
    try:
        call(url, "/check_key", {}, timeout=timeout, key=key)
    except RolloutServerError as exc:
        why = str(exc).split(" failed (", 1)[-1]
        if why.startswith("HTTP 401"):
            return (f"the server refuses this trainer's key ({'none given' if not key else 'a wrong one'}): give the "
                    f"key the server printed at start as rollout.server_key or {KEY_ENV}")
        return f"POST /check_key failed ({why}"
    return None
