"""Who owns a run directory, and whether a resume continues the run that is in it.

Two runs writing one `output_dir` lose one run's metrics and mix their checkpoints, and a resume
with another task, reward or learning rate silently continues the old run under the new name. So a
run holds `<output_dir>/.lock` (an `fcntl.flock`; the file names its PID and host) for as long as
it lives, and a resume first compares the saved `config.yaml` with the new config: differing keys
stop the run, named, unless `train.resume_force=true`.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import yaml

from mmrlvr.config import portable_model_path, Config, ConfigError, short, to_dict
from mmrlvr.config.schema import read_as_saved_today
from mmrlvr.data.staged import staged_change
from mmrlvr.train.run_dir_paths import run_dir_problem, start_over

LOCK = ".lock"
# keys a resume may change: how long the run goes on, how it logs, verifier processes, where it lives
RESUMABLE = frozenset({
    "train.steps", "train.resume", "train.resume_force", "train.log_every", "train.log_with", "train.save_every",
    "train.allow_nonempty_output_dir",  # whether other files may sit beside the run, never what it trains
    "train.eval_every", "verifier_workers", "verifier_timeout", "eval.batch_size", "threads", "device",
    "output_dir",  # a run directory moved or copied elsewhere is still the same run
    "rollout.server_url", "rollout.server_timeout", "rollout.server_key",  # a restarted rollout server (new address) serves the same policy
    # the bad-row limit says when to stop, never what is trained on (a run saved with the old
    # task.max_bad_media_frac: 0.01 default resumes under the one task.max_bad_frac)
    "task.max_bad_frac", "task.max_bad_media_frac",
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
    """Hold `<run_dir>/.lock` for this process; raise RunDirError if another process holds it.

    The lock is an `fcntl.flock` on that file, held for the run's life; the file's text (PID and
    host) only names the holder in messages. The kernel decides who holds it, atomically, so two
    runs started at the same instant never both get it (a file created empty and filled in after
    let a second starter read no PID, call the owner dead and take the lock too), and a killed
    run's lock is freed with its process: the next run takes it over (with a warning) without
    unlinking a file someone else may hold. A lock naming another host is refused: a file system
    that does not share locks between hosts would let both run, so delete it by hand if that run
    is over."""
    warn = warn or (lambda msg: print(f"mmrlvr: warning: {msg}", file=sys.stderr))
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    key = str(run_dir.resolve())
    if key in _HELD:
        return path  # this process already holds it (train called twice)
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = _read(path).get("pid")
            raise RunDirError(f"output_dir {run_dir} is in use by process {pid if pid is not None else '?'} "
                              f"(lock file {path}); wait for it, stop it, or choose another output_dir") from None
        except OSError as exc:
            os.close(fd)
            raise RunDirError(f"output_dir {run_dir}: cannot lock {path} ({exc.strerror}); choose an output_dir "
                              "on a file system with file locks") from None
        if not _same_file(fd, path):  # its holder released and removed it between our open and flock
            os.close(fd)
            continue
        holder = _parse(os.pread(fd, 4096, 0))
        pid, host = holder.get("pid"), holder.get("host")
        if isinstance(pid, int) and host not in (None, me["host"]):
            os.close(fd)
            raise RunDirError(f"output_dir {run_dir} is locked by process {pid} on host {host} "
                              f"({path}); delete that file if the run is over")
        if pid is not None and pid != me["pid"]:
            why = ("no longer holds it (a reused PID, or a run without file locks)" if isinstance(pid, int) and _alive(pid)
                   else "is no longer running")
            warn(f"taking over {path} from process {pid}, which {why}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        _HELD[key] = fd
        atexit.register(release_lock, run_dir)  # also when the run ends by an exception
        return path
    raise RunDirError(f"output_dir {run_dir}: could not take the lock {path}")


# run directory (resolved) -> the descriptor whose flock this process holds
_HELD: dict[str, int] = {}


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _parse(raw: bytes) -> dict:
    try:
        out = json.loads(raw.decode())
        return out if isinstance(out, dict) else {}
    except ValueError:
        return {}


def _read(path: Path) -> dict:
    try:
        return _parse(path.read_bytes())
    except OSError:
        return {}


def release_lock(run_dir: str | Path) -> None:
    """Let go of the lock if this process holds it (never another run's): the file is removed
    first, while still held, so no one can lock the old file after a new one appears."""
    fd = _HELD.pop(str(Path(run_dir).resolve()), None)
    if fd is None:
        return
    path = Path(run_dir) / LOCK
    try:
        if _same_file(fd, path):
            path.unlink()
    finally:
        os.close(fd)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"train": {"lr": 1}} -> {"train.lr": 1}, task arguments included; a list of mappings
    (rewards) by position, {"rewards[0].weight": 0.5}, so a refused resume names the very key."""
    if isinstance(d, list) and d and any(isinstance(x, (dict, list)) for x in d):
        out: dict[str, Any] = {}  # a mapping inside a list is named by position too, never printed elided
        for i, x in enumerate(d):
            out.update(_flat(x, f"{prefix}[{i}]") if isinstance(x, (dict, list)) else {f"{prefix}[{i}]": x})
        return out
    if isinstance(d, (dict, list)) and not d and prefix:
        return {}  # empty: its entries, if any appear, read "(absent) -> ..."
    if not isinstance(d, dict):
        return {prefix: d}
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flat(v, key) if isinstance(v, (dict, list)) else {key: v})
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


def _said(value: Any) -> str:
    """A flattened value in full (a long path differs at its end), cut only past 300 characters."""
    if value is None:
        return "(absent)"
    text = repr(value)
    return text if len(text) <= 300 else short(value, 300)


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
    new = portable_model_path(yaml.safe_load(yaml.safe_dump(to_dict(cfg), sort_keys=False)))  # as it is saved
    saved = read_as_saved_today(saved)  # a run directory written by an older version
    # rows and rewards mmrlvr.run staged are named by content: other ones are another folder
    said = [(k, a, b, staged_change(a, b)) for k, a, b in config_differences(saved, new)]
    said = [(k, a, b, text) for k, a, b, text in said if text != ""]  # "": same content, moved run dir
    diffs = [(k, a, b) for k, a, b, _ in said]
    if diffs and not cfg.train.resume_force:
        what = "; ".join(text or f"{k}: {_said(a)} -> {_said(b)}" for k, a, b, text in said[:8])
        more = f"; and {', '.join(k for k, _, _ in diffs[8:])}" if len(diffs) > 8 else ""  # every key named
        raise RunDirError(f"output_dir {run_dir} holds a run with another config ({what}{more}); resume with "
                          "the same config, choose another output_dir, set train.resume_force=true to resume "
                          f"anyway, or set {start_over(run_dir)}")
    if diffs:
        (run_dir / "config.prev.yaml").write_text(saved_path.read_text())
    return diffs


def claim_run_dir(run_dir: str | Path, cfg: Config, is_main: bool = True) -> list[tuple[str, Any, Any]]:
    """Refuse a run that would delete what it did not write (`run_dir_paths`), lock `run_dir` for this
    run, then check that a resume continues the same config (above).

    Every rank calls it before anything in the directory is cleared or written: the main process
    locks and checks, and with several processes its verdict is broadcast, so all ranks stop
    together with the same line instead of the others waiting forever at the next barrier."""
    error, diffs = None, []
    if is_main:
        held = str(Path(run_dir).resolve()) in _HELD  # mmrlvr.run locks before it stages its inputs
        try:
            why = run_dir_problem(cfg)  # before the lock file: nothing written, nothing removed
            if why:
                raise RunDirError(why)
            acquire_lock(run_dir)
            diffs = check_resume(run_dir, cfg)
        except RunDirError as exc:
            error = str(exc)
            if not held:
                release_lock(run_dir)  # refused: the directory is not ours to keep (a notebook lives on)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise RunDirError(error)
    return diffs
