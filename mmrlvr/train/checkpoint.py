"""Atomic checkpoints that resume exactly: weights, optimizer, RNG states, data position.

A checkpoint is written to a temporary directory and renamed into place, so a run killed while
saving leaves the previous checkpoint intact and never a half-written one.

Nothing in a checkpoint can run code when it is resumed: the run state is JSON (`state.json`),
and the `.pt` files (optimizer, LR schedule, RNG states) hold only tensors, numbers, strings and
containers of them, read with `torch.load(weights_only=True)`; a file holding anything else (an
object planted by whoever could write the run directory) is refused with one line.
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

from mmrlvr.config import ConfigError
from mmrlvr.train.checkpoint_files import loader_reads, remove_checkpoint
from mmrlvr.train.distributed import barrier, rank_world
from mmrlvr.train.run_dir_paths import RUN_FILES, clear_run_dir, start_over  # noqa: F401 - re-exported


def _rng_state() -> dict:
    """Every RNG state as tensors, ints and strings only (what `weights_only=True` reads back)."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "numpy": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)}}


def _set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    npy = state["numpy"]
    if isinstance(npy, dict):
        np.random.set_state((npy["kind"], npy["key"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["gauss"]))
    else:  # the numpy tuple of checkpoints written before (see _OLD_RNG_GLOBALS)
        np.random.set_state(tuple(npy))
    torch.set_rng_state(state["torch"])


# Checkpoints written before RNG states were stored as tensors hold numpy's RNG state as an array:
# rebuilding a plain numeric array is all these allow (an object array's items still go through
# the same restricted unpickler), so such runs still resume.
_OLD_RNG_GLOBALS = [np._core.multiarray._reconstruct, np.ndarray, np.dtype, np.dtypes.UInt32DType]


def safe_load(path: Path):
    """`torch.load` that never runs code: tensors, numbers, strings, containers, nothing else.

    A file holding any other object (a tampered or foreign checkpoint) raises CheckpointError, one
    line naming the file and the refused object."""
    import pickle

    try:
        with torch.serialization.safe_globals(_OLD_RNG_GLOBALS):
            return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        found = re.search(r"(?:GLOBAL|global:?) ([\w.]+)", str(exc))
        what = f" ({found.group(1)})" if found else ""
        raise CheckpointError(f"{path}: refused to load: it holds an object that is not a tensor or plain data{what}; "
                              "a checkpoint written by mmrlvr never does (tampered, or from another program)") from None


def _fsdp2(model) -> bool:
    """Parameters are FSDP2 shards (DTensor), however the model was sharded (accelerate, torch)."""
    return any(type(p).__name__ == "DTensor" for p in model.parameters())


def _sharded(accelerator, model) -> bool:
    """FSDP / DeepSpeed: parameters and optimizer state live in pieces on the ranks."""
    kind = str(getattr(accelerator, "distributed_type", "")).split(".")[-1]
    return kind in ("FSDP", "DEEPSPEED") or _fsdp2(model)


def _full_state_dict(model, accelerator, wrapped, masters=None) -> dict | None:
    """The full weights on rank 0 (a collective), or None when the model's own state dict is it.

    The trainable weights are the float32 masters of a bf16 run, whoever holds them: `masters`
    (one process / DDP), FSDP2's float32 shards, DeepSpeed's optimizer. FSDP2 shards are gathered
    with torch's `get_model_state_dict` (the call accelerate makes for FSDP2): saving the sharded
    module as it is would write each rank's DTensor pieces, which safetensors refuses. DeepSpeed
    ZeRO goes through accelerate (16-bit consolidation), its masters through DeepSpeed's
    `safe_get_full_fp32_param`."""
    if _fsdp2(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if _sharded(accelerator, model):
        full = accelerator.get_state_dict(wrapped)
        deepspeed = str(getattr(accelerator, "distributed_type", "")).endswith("DEEPSPEED")
        return _deepspeed_masters(model, full) if deepspeed else full
    if masters is not None:
        return masters.state_dict(model)
    return None


def _deepspeed_masters(model, full: dict | None) -> dict | None:
    """DeepSpeed's 16-bit state dict with each trainable weight's float32 master in its place.
    `safe_get_full_fp32_param` is a collective under ZeRO-3: every rank calls it for every weight."""
    try:
        from deepspeed.utils import safe_get_full_fp32_param
    except ImportError:  # not DeepSpeed after all
        return full
    found = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            master = safe_get_full_fp32_param(p)
            if master is not None:
                found[name] = master.detach().cpu()
    if full is None:  # ranks > 0 receive nothing
        return None
    return {k: found.get(k, v) for k, v in full.items()}


def save_checkpoint(run_dir: str | Path, step: int, model, processor, optimizer, state: dict, keep: int = 2,
                    scheduler=None, accelerator=None, wrapped=None, masters=None) -> Path:
    """Write checkpoints/step_<step>/ atomically and keep only the newest `keep`.

    With several processes every rank must call this (it is a collective): under FSDP/ZeRO the
    full weights are gathered to rank 0, which writes a plain `from_pretrained` directory that
    loads in one process; each rank adds its optimizer shard (FSDP/ZeRO) and its RNG state, so
    the run resumes under the same launcher and world size. `model` is the unwrapped policy,
    `wrapped` what `accelerator.prepare` returned, `masters` the `precision.MasterWeights` of a bf16
    model (one process / DDP): the weights written are the trainable ones' float32 masters (frozen
    ones in the model's dtype), so a resume continues exactly.
    """
    rank, world = rank_world()
    root = Path(run_dir) / "checkpoints"
    full = _full_state_dict(model, accelerator, wrapped, masters)  # a collective when sharded
    sharded = _sharded(accelerator, model)
    if world == 1:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    else:  # one temporary directory every rank can name
        tmp = root / f".tmp-step_{step}"
        if rank == 0:
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        barrier()
    if rank == 0:
        model.save_pretrained(tmp, **({"state_dict": full} if full is not None else {}))
        processor.save_pretrained(tmp)
        blob = {"rng": _rng_state()}
        if not sharded:  # DDP / one process: rank 0's optimizer state is everyone's
            blob["optimizer"] = optimizer.state_dict()
        if scheduler is not None:
            blob["scheduler"] = scheduler.state_dict()
        torch.save(blob, tmp / "trainer_state.pt")
    if sharded:
        torch.save(optimizer.state_dict(), tmp / f"optimizer_rank{rank}.pt")
    if world > 1 and rank > 0:
        torch.save(_rng_state(), tmp / f"rng_rank{rank}.pt")
    barrier()
    final = root / f"step_{step}"
    if rank == 0:
        # sizes and sha256 of every file (all ranks'), written last: a checkpoint whose files do
        # not match, or that holds a file a loader reads that it was not saved with, is broken
        saved = [f for f in sorted(tmp.rglob("*")) if f.is_file()]
        files = {str(f.relative_to(tmp)): f.stat().st_size for f in saved}
        hashes = {str(f.relative_to(tmp)): file_sha256(f) for f in saved}
        record = {"step": step, **state, "world_size": world, "files": files, "sha256": hashes}
        (tmp / "state.json").write_text(json.dumps({**record, "state_sha256": _state_digest(record)}, indent=1))
        if final.exists():  # a step redone after a resume: its files go, anyone else's are kept aside
            remove_checkpoint(final)
        os.replace(tmp, final)
        for old in list_checkpoints(run_dir)[:-keep]:
            remove_checkpoint(old)
    barrier()
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := re.fullmatch(r"step_(\d+)", p.name))]
    return [p for _, p in sorted(found)]


class CheckpointError(ConfigError):
    """No checkpoint in a run directory can be resumed from (the CLI prints it as one line)."""


def file_sha256(path: Path) -> str:
    """sha256 of a file read in blocks (hashlib's own loop: a 7 GB shard never sits in memory)."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _state_digest(record: dict) -> str:
    """sha256 of state.json's content without its own digest (canonical JSON)."""
    import hashlib

    rest = {k: v for k, v in record.items() if k != "state_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why a checkpoint cannot be resumed from, else None: missing, truncated or empty files and,
    for checkpoints saved with hashes, any file whose content changed since the save (weights,
    optimizer, config, tokenizer, state.json itself) or that a loader would read and was not there
    when it was saved. Other files someone added (an eval report, a note) are not the checkpoint's:
    they neither break it nor are deleted with it (checkpoint_files)."""
    try:
        state = json.loads((ckpt / "state.json").read_text())
        step = state["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return "state.json is missing, empty or not JSON"
    if not isinstance(step, int):
        return "state.json has no step"
    if "state_sha256" in state and state["state_sha256"] != _state_digest(state):
        return "state.json changed since it was saved (its sha256 differs)"
    hashes = state.get("sha256")
    if isinstance(hashes, dict):
        present = {str(f.relative_to(ckpt)) for f in ckpt.rglob("*") if f.is_file()} - {"state.json"}
        extra = sorted(name for name in present - set(hashes) if loader_reads(name))
        if extra:
            return f"{extra[0]} was not there when the checkpoint was saved"
    files = state.get("files")
    if files is None:  # written before sizes were recorded: the files must at least be there
        files = {"trainer_state.pt": None}
        weights = [f for f in ckpt.iterdir() if f.suffix == ".safetensors" or f.name.endswith(".bin")]
        if not weights:
            return "no model weights"
        files.update({f.name: None for f in weights})
    for name, size in files.items():
        path = ckpt / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if (size is None and actual == 0) or (size is not None and actual != size):
            return f"{name} is {actual} bytes" + ("" if size is None else f", {size} when saved")
    for name, expected in (hashes or {}).items() if isinstance(hashes, dict) else ():
        path = ckpt / name
        if not path.is_file():
            return f"{name} is missing"
        if file_sha256(path) != expected:
            return f"{name} changed since it was saved (its sha256 differs)"
    return None


def latest_checkpoint(run_dir: str | Path, warn=None) -> Path | None:
    """The newest intact checkpoint; each broken newer one is named through `warn`.

    Raises CheckpointError when checkpoints exist but none is intact (resuming from nothing would
    silently start over in a directory that holds a run).
    """
    import sys

    warn = warn or (lambda msg: print(f"mmrlvr: warning: {msg}", file=sys.stderr))
    broken = []
    for ckpt in reversed(list_checkpoints(run_dir)):
        why = checkpoint_problem(ckpt)
        if why is None:
            for bad, bad_why in broken:
                warn(f"checkpoint {bad} is corrupt ({bad_why}); resuming from {ckpt.name}")
            return ckpt
        broken.append((ckpt, why))
    if broken:
        names = "; ".join(f"{c.name}: {w}" for c, w in broken)
        raise CheckpointError(f"no intact checkpoint in {Path(run_dir) / 'checkpoints'} ({names}); "
                              f"move them out of the way, or set {start_over(run_dir)}")
    return None


def remove_partial_saves(run_dir: str | Path) -> list[Path]:
    """Delete the temporary directories of saves a kill interrupted (checkpoints/.tmp-*, .warm-*, .model-*)."""
    root = Path(run_dir)
    partial = [*root.glob("checkpoints/.tmp-*"), *root.glob(".warm-*"), *root.glob(".model-*")]
    for path in partial:
        shutil.rmtree(path, ignore_errors=True)
    return partial


def load_trainer_state(ckpt: Path, optimizer, scheduler=None) -> dict:
    """Restore optimizer, LR schedule and RNG states; return the saved state dict (step, data position...)."""
    rank, world = rank_world()
    state = json.loads((ckpt / "state.json").read_text())
    saved_world = state.pop("world_size", 1)
    blob = safe_load(ckpt / "trainer_state.pt")
    shard = ckpt / f"optimizer_rank{rank}.pt"
    if "optimizer" in blob:
        optimizer.load_state_dict(blob["optimizer"])
    elif saved_world != world or not shard.exists():
        raise ValueError(f"{ckpt} holds optimizer shards of {saved_world} processes; resume it with "
                         f"{saved_world} processes (this run has {world})")
    else:
        optimizer.load_state_dict(safe_load(shard))
    if scheduler is not None and "scheduler" in blob:
        scheduler.load_state_dict(blob["scheduler"])
    rng = ckpt / f"rng_rank{rank}.pt"
    _set_rng_state(safe_load(rng) if rank > 0 and rng.exists() else blob["rng"])
    return state


def write_final_model(ckpt: Path, out: Path, model_cfg) -> Path:
    """The run's final policy for serving (vLLM, `from_pretrained`) in `model_cfg.dtype`, LoRA merged
    into its base, written atomically to `out` (the run directory's `model/`).

    A checkpoint holds the float32 master weights a resume needs (twice a bf16 model's size); this
    is what `model.dtype` asked for. Rank 0 only: it reads the final checkpoint back from disk."""
    import dataclasses

    from mmrlvr.models.load import load_checkpoint

    model, processor = load_checkpoint(str(ckpt), dataclasses.replace(model_cfg, path=str(ckpt)))
    out = Path(out)
    tmp = Path(tempfile.mkdtemp(prefix=".model-", dir=out.parent))
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out
