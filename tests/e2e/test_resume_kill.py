"""A training process killed with SIGKILL mid-step resumes to exactly the uninterrupted run.

For a preset with a KL reference (reinforce_pp: the reference must be the warm-started policy
again, not the checkpoint) and one with dynamic sampling (dapo: the data position and RNG states
must make the resampling rounds repeat exactly); and grpo with prompt replay, DBB advantages and
demonstrations together (the replay queue, the posteriors and the demo schedule must carry over).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "task.train_size=32", "task.eval_size=8", "warm_start.steps=2", "warm_start.batch_size=4",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
    "train.steps=4", "train.save_every=2", "train.log_every=1", "train.lr=1e-3", "eval.batch_size=8",
    "verifier_workers=0",
]


def _steps(run: Path) -> dict:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "reward/mean" in r}


def _kill_after_checkpoint(args: list[str], run: Path, step: int) -> int:
    """Start `mmrlvr train` in a child process; SIGKILL it as soon as checkpoint `step` exists,
    i.e. while it works on step `step` + 1. Returns the child's exit status."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", *args],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = run / "checkpoints" / f"step_{step}" / "state.json"
    try:
        while not marker.exists():
            assert child.poll() is None, "the training process ended before its checkpoint"
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        return child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["reinforce_pp", "dapo", "efficiency"])
def test_killed_run_resumes_exactly(tmp_path, preset):
    efficiency = preset == "efficiency"
    se = ["sample_efficiency.replay.enabled=true", "sample_efficiency.replay.cooldown=1",
          "sample_efficiency.replay.max_pass_rate=1.0", "sample_efficiency.dbb.enabled=true",
          "sample_efficiency.dbb.lam=0.7", "sample_efficiency.demos.enabled=true", "sample_efficiency.demos.p0=1.0",
          "sample_efficiency.demos.k=1"]
    args = [*SMALL, *(se if efficiency else [f"algo.algorithm={preset}"]), "algo.max_rounds=2"]
    # rewards the barely-warm policy gets mixed groups from (the count reward is 0 everywhere at this
    # size), so the policy moves: the KL term has something to measure, and with dapo half the prompts
    # give all-equal groups, which dynamic sampling must drop and resample
    fn = "even_length_odd_ids" if preset == "dapo" else "even_length"
    args.append(f"rewards=[{{verifier: {ROOT / 'tests/e2e/user_verifier.py'}:{fn}}}]")
    straight = tmp_path / "straight"
    train(load_config(ROOT / "configs/quickstart.yaml", [*args, f"output_dir={straight}"]))
    killed = tmp_path / "killed"
    status = _kill_after_checkpoint([*args, f"output_dir={killed}"], killed, step=2)
    assert status == -signal.SIGKILL
    assert not (killed / "summary.json").exists() and not (killed / "checkpoints" / "step_4").exists()
    train(load_config(ROOT / "configs/quickstart.yaml", [*args, f"output_dir={killed}"]))  # resumes at step 3
    a, b = _steps(straight), _steps(killed)
    assert sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = ("replay/frac", "replay/queue", "replay/mean_reuse", "demos/frac") if efficiency else ()
        for key in ("reward/mean", "rollout/rounds", "rollout/mixed_group_frac", *keys):
            assert a[step][key] == b[step][key], (step, key)
        for key in ("loss/policy", "loss/kl", "actor/entropy"):
            assert (key in a[step]) == (key in b[step]), (step, key)  # absent when nothing was updated
            if key in a[step]:
                assert a[step][key] == pytest.approx(b[step][key], rel=1e-5, abs=1e-7), (step, key)
    if preset == "reinforce_pp":
        assert a[4]["loss/kl"] > 0  # the reference is the warm-started policy in both runs
    if preset == "dapo":
        assert any(a[s]["rollout/rounds"] == 2 for s in a)  # resampling happened somewhere
    wa = load_file(straight / "checkpoints" / "step_4" / "model.safetensors")
    wb = load_file(killed / "checkpoints" / "step_4" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    # the run state: the prompt source's position and the per-prompt statistics (visits, last step,
    # reward sums) carried through the kill exactly; the killed run rebuilt steps 3-4 from step 2's
    sa = json.loads((straight / "checkpoints" / "step_4" / "state.json").read_text())
    sb = json.loads((killed / "checkpoints" / "step_4" / "state.json").read_text())
    assert sa["source"] == sb["source"] and sa["source"]["pos"] > 0
    assert sa["prompt_stats"] == sb["prompt_stats"]
    assert max(e["last_step"] for e in sa["prompt_stats"].values()) == 4
    visits = sum(e["visits"] for e in sa["prompt_stats"].values())
    if efficiency:  # the queue, reuse counts and posteriors matched above; the methods acted
        assert visits == sa["source"]["pos"] + sum(sa["source"]["reuse"].values()) == 4 * 2
        assert sum(sa["source"]["reuse"].values()) > 0 and any(a[s]["demos/frac"] > 0 for s in (3, 4))
        assert all("dbb" in e["extra"] for e in sa["prompt_stats"].values())
        return
    # every prompt drawn is recorded once, also the groups dynamic sampling dropped and resampled
    assert visits == sa["source"]["pos"] >= 4 * 2


def _tb_steps(run: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = []
    for folder in sorted({p.parent for p in (run / "tensorboard").rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
        if tag in acc.Tags()["scalars"]:
            found += [e.step for e in acc.Scalars(tag)]
    return sorted(found)


@pytest.mark.slow
def test_resumed_run_shows_each_step_once_in_tensorboard(tmp_path):
    """A run that logged steps 3-4 after its last kept checkpoint (step 2) and is resumed from it
    logs 3-4 again: tensorboard must show them once, as metrics.jsonl does."""
    import shutil

    run = tmp_path / "run"
    args = [*SMALL, f"output_dir={run}"]
    train(load_config(ROOT / "configs/quickstart.yaml", args))
    assert _tb_steps(run, "reward/mean") == [1, 2, 3, 4]
    shutil.rmtree(run / "checkpoints" / "step_4")  # as if killed after logging step 4, before saving it
    (run / "summary.json").unlink()
    train(load_config(ROOT / "configs/quickstart.yaml", args))  # resumes from step 2
    assert sorted(_steps(run)) == [1, 2, 3, 4]
    assert _tb_steps(run, "reward/mean") == [1, 2, 3, 4]
