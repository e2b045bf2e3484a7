"""Who owns a run directory, and whether a resume continues the run that is in it.

Two runs writing one `output_dir` lose one run's metrics and mix their checkpoints, and a resume
with another task, reward or learning rate silently continues the old run under the new name. So a
run holds `<output_dir>/.lock` (naming its PID and host) for as long as it lives, and a resume
first compares the saved `config.yaml` with the new config: differing keys stop the run, named,
unless `train.resume_force=true`.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import yaml

from mmrlvr.config import Config, ConfigError, short, to_dict

LOCK = ".lock"
# keys a resume may change: how long the run goes on, how it logs, verifier processes, where it lives
RESUMABLE = frozenset({
    "train.steps", "train.resume", "train.resume_force", "train.log_every", "train.log_with", "train.save_every",
    "train.eval_every", "verifier_workers", "verifier_timeout", "eval.batch_size", "threads", "device",
    "output_dir",  # a run directory moved or copied elsewhere is still the same run
})


class RunDirError(ConfigError):
    """The run directory is in use or holds another run (the CLI prints it as one line)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def acquire_lock(run_dir: str | Path, warn=None) -> Path:
    """Create `<run_dir>/.lock` naming this process; raise RunDirError if a live process holds it.

    A lock whose process is gone (a killed run) is taken over, with a warning. A lock from another
    host cannot be checked, so it is refused: delete it by hand if that run is over."""
    warn = warn or (lambda msg: print(f"mmrlvr: warning: {msg}", file=sys.stderr))
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read(path)
            pid, host = holder.get("pid"), holder.get("host")
            if pid == me["pid"] and host == me["host"]:
                return path  # this process already holds it (train called twice)
            if isinstance(pid, int) and host == me["host"] and _alive(pid):
                raise RunDirError(f"output_dir {run_dir} is in use by process {pid} (lock file {path}); "
                                  "wait for it, stop it, or choose another output_dir") from None
            if isinstance(pid, int) and host not in (None, me["host"]):
                raise RunDirError(f"output_dir {run_dir} is locked by process {pid} on host {host} "
                                  f"({path}); delete that file if the run is over") from None
            warn(f"taking over {path} from process {pid if pid is not None else '?'}, which is no longer running")
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        atexit.register(release_lock, run_dir)  # also when the run ends by an exception
        return path
    raise RunDirError(f"output_dir {run_dir}: could not take the lock {path}")


def _read(path: Path) -> dict:
    try:
        out = json.loads(path.read_text())
        return out if isinstance(out, dict) else {}
    except (OSError, ValueError):
        return {}


def release_lock(run_dir: str | Path) -> None:
    """Remove the lock if this process holds it (never another run's)."""
    path = Path(run_dir) / LOCK
    if _read(path).get("pid") == os.getpid():
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"train": {"lr": 1}} -> {"train.lr": 1}; lists (rewards) are compared whole."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flat(v, key) if isinstance(v, dict) and k != "args" else {key: v})
    return out


def config_differences(saved: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) for every key that differs, except those a resume may change."""
    a, b = _flat(saved), _flat(new)
    missing = object()
    out = []
    for key in sorted(set(a) | set(b)):
        if key in RESUMABLE:
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            out.append((key, None if va is missing else va, None if vb is missing else vb))
    return out


def check_resume(run_dir: str | Path, cfg: Config) -> list[tuple[str, Any, Any]]:
    """Compare `<run_dir>/config.yaml` (the run being resumed) with `cfg` (resolved).

    Raises RunDirError naming the differing keys, unless `cfg.train.resume_force`; then the old
    file is kept as `config.prev.yaml` and the differences are returned. Nothing to compare (a
    new directory, or no checkpoint and no warm start yet) passes."""
    run_dir = Path(run_dir)
    saved_path = run_dir / "config.yaml"
    holds_run = (run_dir / "checkpoints").is_dir() or (run_dir / "warm_start").is_dir()
    if not cfg.train.resume or not saved_path.is_file() or not holds_run:
        return []
    try:
        saved = yaml.safe_load(saved_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RunDirError(f"{saved_path}: cannot read the saved config of the run to resume ({short(str(exc))})") from None
    new = yaml.safe_load(yaml.safe_dump(to_dict(cfg), sort_keys=False))  # the form it is saved in
    diffs = config_differences(saved, new)
    if diffs and not cfg.train.resume_force:
        what = "; ".join(f"{k}: {short(a, 40)} -> {short(b, 40)}" for k, a, b in diffs[:8])
        more = f" (and {len(diffs) - 8} more)" if len(diffs) > 8 else ""
        raise RunDirError(f"output_dir {run_dir} holds a run with another config ({what}{more}); resume with "
                          "the same config, choose another output_dir, set train.resume=false to start over, "
                          "or train.resume_force=true to resume anyway")
    if diffs:
        (run_dir / "config.prev.yaml").write_text(saved_path.read_text())
    return diffs


def claim_run_dir(run_dir: str | Path, cfg: Config, is_main: bool = True) -> list[tuple[str, Any, Any]]:
    """Lock `run_dir` for this run, then check that a resume continues the same config (above).

    Every rank calls it before anything in the directory is cleared or written: the main process
    locks and checks, and with several processes its verdict is broadcast, so all ranks stop
    together with the same line instead of the others waiting forever at the next barrier."""
    error, diffs = None, []
    if is_main:
        try:
            acquire_lock(run_dir)
            diffs = check_resume(run_dir, cfg)
        except RunDirError as exc:
            error = str(exc)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise RunDirError(error)
    return diffs
