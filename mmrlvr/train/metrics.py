"""Metrics a person can plot: one JSON line per step, plus the accelerate trackers (tensorboard by
default; wandb, mlflow, trackio with `train.log_with`)."""

from __future__ import annotations

import json
import math
from pathlib import Path


class MetricsWriter:
    def __init__(self, run_dir: str | Path, accelerator=None, enabled: bool = True):
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self.accelerator = accelerator  # its trackers receive every logged line
        if enabled:
            self._jsonl = open(self.run_dir / "metrics.jsonl", "a", buffering=1)

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines a killed run wrote after its last checkpoint (they are redone)."""
        if not self.enabled:
            return
        self._jsonl.close()
        path = self.run_dir / "metrics.jsonl"
        kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in kept))
        self._jsonl = open(path, "a", buffering=1)

    def log(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(float(v))}
        self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.log(clean, step=step)

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.end_training()
