"""Which files in a checkpoint directory are the checkpoint's, and removing only those.

A checkpoint's `state.json` lists every file the save wrote (sizes and sha256). Anything else in
the directory (an `eval.json`, a note) belongs to someone else: it neither breaks the checkpoint
nor is deleted with it, except a file a loader would read in place of the saved ones (weights,
model/processor configs, code), which makes the checkpoint one that cannot be trusted.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

# suffixes and names transformers, peft and torch read from a model directory
_LOADED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".py", ".gguf", ".h5", ".msgpack", ".jinja")
_LOADED_NAMES = frozenset({
    "config.json", "generation_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
    "processor_config.json", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.json", "adapter_config.json",
    "state.json",
})


def loader_reads(name: str) -> bool:
    """A file of this name (relative path) could be read when the directory is loaded or resumed."""
    base = Path(name).name
    return base in _LOADED_NAMES or base.endswith(_LOADED_SUFFIXES) or base.endswith(".index.json")


def saved_files(ckpt: Path) -> set[str] | None:
    """The files the save wrote (its manifest, state.json included), or None without a readable one."""
    try:
        state = json.loads((ckpt / "state.json").read_text())
    except (OSError, ValueError):
        return None
    names = state.get("sha256") if isinstance(state, dict) else None
    names = names if isinstance(names, dict) else (state.get("files") if isinstance(state, dict) else None)
    return {*names, "state.json"} if isinstance(names, dict) else None


def remove_checkpoint(ckpt: Path, warn=None) -> Path | None:
    """Delete what the save wrote in `ckpt` (its manifest's files; without a readable manifest, the
    files a save writes, by name). Files it did not write are kept, moved to `<ckpt>.kept[-N]` (a
    name no resume lists), and that folder is returned; else None."""
    warn = warn or (lambda msg: print(f"mmrlvr: warning: {msg}", file=sys.stderr))
    own = saved_files(ckpt)
    for path in sorted(ckpt.rglob("*"), reverse=True):  # files before their folders
        name = str(path.relative_to(ckpt))
        if path.is_file() or path.is_symlink():
            if (name in own) if own is not None else loader_reads(name):
                path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    if not any(ckpt.iterdir()):
        ckpt.rmdir()
        return None
    kept = next(p for k in itertools.count() if not (p := ckpt.with_name(f"{ckpt.name}.kept{f'-{k}' if k else ''}")).exists())
    os.replace(ckpt, kept)
    left = sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file())
    warn(f"removed checkpoint {ckpt.name}; kept the files it was not saved with in {kept} ({', '.join(left[:4])})")
    return kept

