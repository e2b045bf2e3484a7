"""Process setup and policy preparation (resume, warm start) for the loop."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from mmrlvr.config import Config
from mmrlvr.models.load import load_policy


def set_threads_and_seed(cfg: Config):
    """Create the Accelerator, then pin torch's CPU threads and seed everything.

    Threads are set after the Accelerator because it may change them; on small VMs torch's
    default OpenMP threads spin-wait and make tiny ops ~100x slower.
    """
    from accelerate import Accelerator
    from transformers import set_seed

    torch.set_num_threads(cfg.threads)
    accelerator = Accelerator(cpu=cfg.device == "cpu")
    if accelerator.device.type == "cpu":
        torch.set_num_threads(cfg.threads)
    set_seed(cfg.seed)
    return accelerator


def _load_from(cfg: Config, path: str | Path):
    if cfg.model.lora_rank > 0 and (Path(path) / "adapter_config.json").exists():
        from peft import PeftModel

        base, processor = load_policy(dataclasses.replace(cfg.model, lora_rank=0))
        return PeftModel.from_pretrained(base, str(path), is_trainable=True), processor
    return load_policy(dataclasses.replace(cfg.model, path=str(path)))


def prepare_policy(cfg: Config, ckpt: Path | None, train_set, run_dir: Path, progress):
    """(model, processor, warm-start info): from a checkpoint, a given warm start, or a new one."""
    from mmrlvr.train.sft import warm_start

    if ckpt is not None:
        model, processor = _load_from(cfg, ckpt)
        return model, processor, None
    ws = cfg.warm_start
    if ws.checkpoint:
        model, processor = load_policy(dataclasses.replace(cfg.model, path=ws.checkpoint))
        return model, processor, {"source": ws.checkpoint}
    done = run_dir / "warm_start"
    if ws.steps > 0 and (done / "warm_start.json").exists():
        model, processor = load_policy(dataclasses.replace(cfg.model, path=str(done)))
        return model, processor, json.loads((done / "warm_start.json").read_text())
    model, processor = load_policy(cfg.model)
    if ws.steps <= 0:
        return model, processor, None
    torch.manual_seed(cfg.seed)
    losses = warm_start(model, processor, train_set, ws.steps, ws.lr, ws.batch_size, cfg.seed,
                        progress=progress.warm_start(ws.steps))
    info = {"source": str(done), "steps": ws.steps, "loss_first": losses[0], "loss_last": losses[-1]}
    tmp = Path(tempfile.mkdtemp(prefix=".warm-", dir=run_dir))
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps(info))
    if done.exists():
        shutil.rmtree(done)
    os.replace(tmp, done)
    return model, processor, info
