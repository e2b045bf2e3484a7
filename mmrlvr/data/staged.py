"""What `mmrlvr.run` stages in a run directory: content-addressed folders under `.mmrlvr_inputs/`.

In-memory rows and reward callables become files the YAML path reads, each input in
`<output_dir>/.mmrlvr_inputs/<kind>-<hash>/` (kind `train`, `eval` or `rewards`; hash: the first 16
hex digits of the SHA-256 over its files' SHA-256s) with `manifest.json` recording each file's hash.
- A resume with other rows or rewards names another folder in config.yaml, so the resume check
  refuses it like any changed key; the same rows and rewards find the same folder again.
- Validation checks that a staged folder is what was written (every file there, every hash
  matching) without reading it: staged rewards are pickled code, unpickled only by the processes
  that score, after the run lock is held.
- Nothing outside `.mmrlvr_inputs/` is written or removed (a user's own `inputs/` is theirs).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

STAGED = ".mmrlvr_inputs"
MANIFEST = "manifest.json"
KINDS = ("train", "eval", "rewards")
_NAME = re.compile(r"(train|eval|rewards)-([0-9a-f]{16})")
# a staged folder named inside a config value (a path, a "file.py:fn" spec, a dict printed whole)
_IN_VALUE = re.compile(r"[^'\"\s,:{}\[\]]*" + re.escape(STAGED) + r"/(train|eval|rewards)-([0-9a-f]{16})"
                       r"(?:/rewards\.py:[A-Za-z_][A-Za-z0-9_]*)?")  # a staged reward's function name is part of it
WHAT = {"train": "train_data: other rows", "eval": "eval_data: other rows", "rewards": "rewards: other reward callables"}


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_hashes(folder: Path) -> dict[str, str]:
    """{path relative to `folder`: sha256} of every file in it but the manifest."""
    return {p.relative_to(folder).as_posix(): _sha256(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).as_posix() != MANIFEST}


def content_hash(hashes: dict[str, str]) -> str:
    """The folder's name part: 16 hex digits over the sorted (path, sha256) pairs."""
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16]


def commit(tmp: Path, root: Path, kind: str) -> tuple[Path, bool]:
    """Move `tmp` (a folder just written, inside `root`) to `root/<kind>-<hash>` with its manifest.

    Returns (folder, created). A folder of that name that verifies holds the same inputs (a resume):
    it is kept and `tmp` removed. The caller holds the run lock, so no one else writes `root`."""
    hashes = file_hashes(tmp)
    (tmp / MANIFEST).write_text(json.dumps({"kind": kind, "sha256": hashes}, indent=1, sort_keys=True))
    final = root / f"{kind}-{content_hash(hashes)}"
    if final.exists():
        if verify(final) is None:
            shutil.rmtree(tmp)
            return final, False
        shutil.rmtree(final)  # ours, and damaged: what was just written is what its name says
    os.rename(tmp, final)
    return final, True


def staged_folder(path: str | Path) -> Path | None:
    """The staged folder `path` lies in (`.../.mmrlvr_inputs/<kind>-<hash>[/...]`), else None."""
    parts = Path(path).expanduser().parts
    for i in range(len(parts) - 1):
        if parts[i] == STAGED and _NAME.fullmatch(parts[i + 1]):
            return Path(*parts[: i + 2])
    return None


def verify(folder: Path) -> str | None:
    """Why `folder` is not exactly what was staged (a file missing, added or changed), else None.

    Reads bytes only; nothing in the folder is imported or unpickled."""
    manifest = folder / MANIFEST
    if not folder.is_dir():
        return f"staged folder {folder} not found"
    try:
        recorded = json.loads(manifest.read_text())["sha256"]
        if not isinstance(recorded, dict):
            raise TypeError
    except FileNotFoundError:
        return f"{manifest} is missing"
    except (OSError, ValueError, KeyError, TypeError):
        return f"{manifest} is unreadable"
    actual = file_hashes(folder)
    for rel in sorted(set(recorded) | set(actual)):
        if rel not in actual:
            return f"{folder / rel} is missing"
        if rel not in recorded:
            return f"{folder / rel} was not staged (a file added after mmrlvr.run wrote the folder)"
        if actual[rel] != recorded[rel]:
            return f"{folder / rel} was changed after it was staged (sha256 {actual[rel][:12]}, recorded {recorded[rel][:12]})"
    if content_hash(recorded) != folder.name.split("-", 1)[-1]:
        return f"{manifest} does not match the folder's name {folder.name}"
    return None


def staged_change(old, new) -> str | None:
    """How two values of one config key differ when only the staged folders they name do.

    None: they differ elsewhere too. "": the same staged content (a run directory moved: another
    path, the same folder names). Else e.g. "train_data: other rows (staged train-1a2b... -> train-3c4d...)"."""
    a, b = str(old), str(new)
    if _IN_VALUE.sub(r"\1", a) != _IN_VALUE.sub(r"\1", b):
        return None
    named_a, named_b = _IN_VALUE.findall(a), _IN_VALUE.findall(b)
    if not named_a and not named_b:
        return None
    out = []
    for kind in KINDS:
        ha = list(dict.fromkeys(h for k, h in named_a if k == kind))
        hb = list(dict.fromkeys(h for k, h in named_b if k == kind))
        if ha != hb:
            out.append(f"{WHAT[kind]} (staged {', '.join(ha) or 'none'} -> {', '.join(hb) or 'none'})")
    return "; ".join(out)


def shown(path: str | Path) -> str:
    """What a message calls the rows at `path`: `train_data` / `eval_data` for rows `mmrlvr.run`
    staged (the user handed them over in memory, and never saw `.mmrlvr_inputs/train-<hash>/`),
    else the path as given."""
    folder = staged_folder(path)
    if folder is None or not folder.name.startswith(("train-", "eval-")):
        return str(path)
    return f"{folder.name.split('-', 1)[0]}_data"


def row_place(path: str | Path, line: int) -> str:
    """Where a row of a JSONL file is, for a message: `file:line`, or `train_data row 3` (0-based,
    the index in the list the user passed) for rows `mmrlvr.run` staged."""
    label = shown(path)
    return f"{label} row {line - 1}" if label != str(path) else f"{path}:{line}"
