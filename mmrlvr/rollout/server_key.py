"""The shared secret between a `mmrlvr rollout-server` and the one trainer it obeys.

Without it any process that reaches the port could load its own weights into the server (every
later rollout would come from them) or hold its lock; two runs pointed at one server would do the
same to each other. So every request that changes or occupies the server (every POST) carries
`Authorization: Bearer <key>`, compared in constant time; GET /health and /info stay open (the
start-up probe, read-only).

The key is given (`--api-key` or `MMRLVR_ROLLOUT_KEY`) or generated and written to a file only its
owner can read; the trainer gets it through `rollout.server_key` or the same environment variable.
Standard library only: the training side imports this without FastAPI or vLLM.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

ENV = "MMRLVR_ROLLOUT_KEY"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def server_key(given: str | None, env: dict | None = None) -> tuple[str, bool]:
    """(key, explicit): `--api-key`, else MMRLVR_ROLLOUT_KEY, else a new random key (explicit False)."""
    env = os.environ if env is None else env
    for key in (given, env.get(ENV)):
        if key is not None and key.strip():
            return key.strip(), True
    return secrets.token_urlsafe(32), False


def default_key_file(port: int) -> Path:
    """Where a generated key goes: the user's runtime directory if there is one, else ~/.cache/mmrlvr."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    root = Path(runtime) / "mmrlvr" if runtime and os.path.isdir(runtime) else Path.home() / ".cache" / "mmrlvr"
    return root / f"rollout-server-{port}.key"


def write_key_file(key: str, path: Path) -> Path:
    """Write `key` to `path`, readable and writable by its owner only (0600) from the first byte on."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT: set it
        os.write(fd, (key + "\n").encode())
    finally:
        os.close(fd)
    return path


def bind_problem(host: str, explicit: bool) -> str | None:
    """Why serving on `host` is refused (None: allowed): beyond loopback the key must be chosen, not generated."""
    if host in LOOPBACK_HOSTS or explicit:
        return None
    return (f"--host {host} serves other machines: give the secret explicitly (--api-key or {ENV}) "
            "so the trainer there can be given the same one")


def client_key(configured: str | None, env: dict | None = None) -> str | None:
    """The trainer's key: rollout.server_key, else MMRLVR_ROLLOUT_KEY, else None (no header sent)."""
    env = os.environ if env is None else env
    for key in (configured, env.get(ENV)):
        if isinstance(key, str) and key.strip():
            return key.strip()
    return None


def auth_header(key: str | None) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def authorized(header: bytes | str | None, key: str) -> bool:
    """Does an Authorization header carry `key`? Constant-time, so timing reveals nothing of the key."""
    if header is None:
        return False
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), key.encode("utf-8"))
