"""With stderr a file (a log, `nohup`, a batch job), progress is plain lines written as the run
goes: one per tenth of the warm start and one per `train.log_every` RL step, never a bar that
only a terminal can redraw (which rich holds back until the run ends)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from mmrlvr.train.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["task.train_size=16", "task.eval_size=4", "warm_start.batch_size=4", "rollout.group_size=2",
         "rollout.prompts_per_step=2", "rollout.max_new_tokens=4", "verifier_workers=0", "train.save_every=0",
         "eval.batch_size=4"]


def test_a_real_run_with_stderr_in_a_file_writes_lines_as_it_goes(tmp_path):
    log = tmp_path / "stderr.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("FORCE_TERMINAL", None)
    argv = [sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", f"output_dir={tmp_path / 'run'}",
            "warm_start.steps=20", "train.steps=4", "train.log_every=2", *SMALL]
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        seen_while_running = False
        while proc.poll() is None:  # the warm start's first line is in the file before the run ends
            seen_while_running = seen_while_running or "warm start 2/20" in log.read_text()
            time.sleep(0.2)
    assert proc.returncode == 0, log.read_text()
    text = log.read_text()
    assert seen_while_running, text
    # 20 warm steps: a line every 20 // 10 = 2 steps
    warm = re.findall(r"^warm start (\d+)/20: loss \d+\.\d{3}  \d+\.\d{2}s/step$", text, re.M)
    assert warm == [str(s) for s in range(2, 21, 2)], text
    # 4 RL steps, log_every 2: steps 2 and 4
    rl = re.findall(r"^RL step (\d)/4: reward \d\.\d{3}  mixed \d\.\d{2}  \d+\.\d{2}s/step$", text, re.M)
    assert rl == ["2", "4"], text
    assert "\x1b[" not in text and "\r" not in text  # no terminal codes, no redraws
    assert "held-out accuracy: before RL" in text


def test_plain_lines_by_hand(capsys):
    """Every log_every-th step and the last; nothing at all when disabled (other ranks)."""
    p = Progress(5, log_every=2, plain=True)
    for step in range(1, 6):
        p.update(step, {"reward/mean": 0.25 * step, "rollout/mixed_group_frac": 0.5, "time/step": 1.5})
    assert capsys.readouterr().err.splitlines() == [
        "RL step 2/5: reward 0.500  mixed 0.50  1.50s/step",
        "RL step 4/5: reward 1.000  mixed 0.50  1.50s/step",
        "RL step 5/5: reward 1.250  mixed 0.50  1.50s/step"]
    cb = Progress(5, plain=True).warm_start(3)  # fewer steps than lines: every step
    for step in (1, 2, 3):
        cb(step, 0.5)
    assert [line.split("  ")[0] for line in capsys.readouterr().err.splitlines()] == [
        "warm start 1/3: loss 0.500", "warm start 2/3: loss 0.500", "warm start 3/3: loss 0.500"]
    off = Progress(5, enabled=False, plain=True)
    off.update(2, {})
    assert off.warm_start(3) is None and capsys.readouterr().err == ""
