"""What a run may delete in its output_dir, and the settings that would make it delete what it did not write.

A fresh run (`train.resume=false`) clears the files an earlier run wrote (`RUN_FILES`); every run
replaces `model/` and `warm_start/` and keeps only the newest checkpoints. So a model or warm start
read from inside those paths would be deleted before (or while) it is read, and a directory that
holds someone else's files would lose them. Both are refused here, one line each, before anything
in the directory is written or removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from mmrlvr.config import Config

# what a run writes in its output_dir: a fresh run clears these (only when an earlier run of ours wrote them)
RUN_FILES = ("checkpoints", "warm_start", "samples", "tensorboard", "token_roles", "metrics.jsonl", "summary.json",
             "config.yaml", "config.prev.yaml", "model")
# written before config.yaml: the run lock, and the inputs mmrlvr.run stages once it holds that lock
BEFORE_CONFIG = frozenset({".lock", ".mmrlvr_inputs"})
# sections every saved config.yaml has (save_config writes the whole resolved config)
_SAVED_SECTIONS = frozenset({"output_dir", "model", "task", "train"})
ALLOW_KEY = "train.allow_nonempty_output_dir"


def start_over(run_dir: str | Path) -> str:
    """The words every refusal uses for `train.resume=false`: it throws the earlier run away."""
    return (f"train.resume=false, which starts over and deletes checkpoints/, model/ and the rest of the earlier "
            f"run in {run_dir}")


def holds_run(run_dir: str | Path) -> bool:
    """An earlier run of ours is in `run_dir`: its config.yaml is a saved mmrlvr config (a run writes
    it before anything else), not a user's file of that name, or it holds a checkpoint's state.json."""
    run_dir = Path(run_dir)
    if any(run_dir.glob("checkpoints/step_*/state.json")):
        return True
    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(saved, dict) and _SAVED_SECTIONS <= set(saved)


def clear_run_dir(run_dir: str | Path) -> None:
    """Remove what an earlier run left in `run_dir` (only the files a run writes, and only when a run
    of ours wrote them: a directory of someone else's files is never cleared)."""
    if not holds_run(run_dir):
        return
    for name in RUN_FILES:
        path = Path(run_dir) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _names(entries: list[str], k: int = 4) -> str:
    return ", ".join(entries[:k]) + (f" and {len(entries) - k} more" if len(entries) > k else "")


def foreign_files_problem(cfg: Config) -> str | None:
    """Why `cfg.output_dir` may not be used: it holds files and no earlier run of ours (refused unless
    train.allow_nonempty_output_dir), or, even then, a file of a name the run writes (it would be
    overwritten or, on a later fresh run, deleted). None when the directory is new, empty or a run's."""
    out = Path(cfg.output_dir).expanduser()
    if not out.is_dir() or holds_run(out):
        return None
    found = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir() if p.name not in BEFORE_CONFIG)
    if not found:
        return None
    if not cfg.train.allow_nonempty_output_dir:
        return (f"output_dir {out} is not empty ({_names(found)}) and holds no earlier mmrlvr run; choose a new "
                f"or empty output_dir, or set {ALLOW_KEY}=true to write beside those files (none of them is deleted)")
    taken = [name for name in found if name.rstrip("/") in RUN_FILES]
    if taken:
        return (f"output_dir {out} holds {_names(taken)}, which no mmrlvr run wrote and this run would overwrite; "
                f"move them or choose another output_dir ({ALLOW_KEY} never replaces a file the run did not write)")
    return None


def _entry_holding(path: str | None, run_dir: Path) -> str | None:
    """The entry of RUN_FILES (e.g. "checkpoints") that the existing local `path` lies in, else None."""
    if not path:
        return None
    local = Path(path).expanduser()
    if not local.exists():
        return None  # a hub name, or "tiny"
    local, root = local.resolve(), run_dir.expanduser().resolve()
    return next((name for name in RUN_FILES if local.is_relative_to(root / name)), None)


def read_paths_problem(cfg: Config) -> str | None:
    """A model or warm start the run reads from inside the paths it clears or replaces: it would be
    deleted before it is loaded (a fresh run) or during the run (model/ and warm_start/ are replaced,
    old checkpoints removed), and the earlier run with it."""
    out = Path(cfg.output_dir)
    for key, value in (("model.path", cfg.model.path), ("warm_start.checkpoint", cfg.warm_start.checkpoint)):
        entry = _entry_holding(value, out)
        if entry:
            return (f"{key}: {value} lies inside {out / entry}, which a run in output_dir {out} deletes or "
                    "replaces (a fresh run clears it before the model loads; only the newest checkpoints are "
                    "kept); copy it out of the run directory first, or choose another output_dir")
    return None


def run_dir_problem(cfg: Config) -> str | None:
    """The first reason this run could delete what it did not write (read paths first), else None."""
    return read_paths_problem(cfg) or foreign_files_problem(cfg)
