"""Atomic checkpoints that resume exactly: weights, optimizer, RNG states, data position.

A checkpoint is written to a temporary directory and renamed into place, so a run killed while
saving leaves the previous checkpoint intact and never a half-written one.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch


def _rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(run_dir: str | Path, step: int, model, processor, optimizer, state: dict, keep: int = 2,
                    scheduler=None) -> Path:
    """Write checkpoints/step_<step>/ atomically and keep only the newest `keep`."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    blob = {"optimizer": optimizer.state_dict(), "rng": _rng_state()}
    if scheduler is not None:
        blob["scheduler"] = scheduler.state_dict()
    torch.save(blob, tmp / "trainer_state.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
    final = root / f"step_{step}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := re.fullmatch(r"step_(\d+)", p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_trainer_state(ckpt: Path, optimizer, scheduler=None) -> dict:
    """Restore optimizer, LR schedule and RNG states; return the saved state dict (step, data position...)."""
    blob = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    if scheduler is not None and "scheduler" in blob:
        scheduler.load_state_dict(blob["scheduler"])
    _set_rng_state(blob["rng"])
    return json.loads((ckpt / "state.json").read_text())


RUN_FILES = ("checkpoints", "warm_start", "samples", "tensorboard", "metrics.jsonl", "summary.json", "config.yaml")


def clear_run_dir(run_dir: str | Path) -> None:
    """Remove what an earlier run left in `run_dir` (only the files a run writes)."""
    for name in RUN_FILES:
        path = Path(run_dir) / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
