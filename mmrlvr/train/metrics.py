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

    def truncate_after(self, step: int | None) -> None:
        """On resume: keep what the checkpoint at `step` had seen, drop what a killed run wrote after.

        Kept: the first line of each step up to `step` (the step's own metrics; a second line for
        the last step is the final evaluation, which the resumed run writes again). `step=None`
        (no checkpoint: the run starts over) keeps nothing. A line cut by the kill is dropped.
        """
        if not self.enabled:
            return
        self._jsonl.close()
        path = self.run_dir / "metrics.jsonl"
        kept, seen = [], set()
        for line in path.read_text(encoding="utf-8", errors="replace").split("\n") if step is not None else []:
            try:
                s = json.loads(line).get("step")
            except (ValueError, AttributeError):
                continue
            if isinstance(s, int) and s <= step and s not in seen:
                seen.add(s)
                kept.append(line)
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        tmp.replace(path)  # atomic: a kill now leaves the old file or the new one
        self._jsonl = open(path, "a", buffering=1, encoding="utf-8")

    def log(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(float(v))}
        self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.log(clean, step=step)

    def close(self) -> None:
        """Close the file and end the trackers (their writer threads); a second call does nothing."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if self.enabled:
            self._jsonl.close()
        if self.accelerator is not None and self.accelerator.trackers:
            self.accelerator.end_training()
