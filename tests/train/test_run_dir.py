"""One run per output_dir (a lock naming its PID), and a resume that checks what it resumes."""

import json
import os
import subprocess
import sys

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config, save_config
from mmrlvr.train.run_dir import (
    LOCK, RunDirError, acquire_lock, check_resume, config_differences, release_lock,
)


def _live_process():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_lock_names_the_pid_and_refuses_a_second_run(tmp_path):
    path = acquire_lock(tmp_path)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    release_lock(tmp_path)
    assert not path.exists()
    other = _live_process()
    try:
        (tmp_path / LOCK).write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename}))
        with pytest.raises(RunDirError, match=rf"output_dir {tmp_path} is in use by process {other.pid} \(lock file"):
            acquire_lock(tmp_path)
        release_lock(tmp_path)  # not ours: left alone
        assert json.loads((tmp_path / LOCK).read_text())["pid"] == other.pid
    finally:
        other.kill()
        other.wait()


def test_a_stale_lock_is_taken_over(tmp_path):
    dead = _dead_pid()
    (tmp_path / LOCK).write_text(json.dumps({"pid": dead, "host": os.uname().nodename}))
    said = []
    acquire_lock(tmp_path, warn=said.append)
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    assert len(said) == 1 and f"from process {dead}, which is no longer running" in said[0]
    release_lock(tmp_path)


def _resolved(run, *overrides):
    """The config as `train` saves it: preset and defaults written out."""
    import dataclasses

    from mmrlvr.algos.presets import resolve_algo

    cfg = load_config("configs/quickstart.yaml", [f"output_dir={run}", *overrides])
    tokens = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    return dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens),
                               eval=dataclasses.replace(cfg.eval, max_new_tokens=tokens))


def _saved_run(tmp_path):
    """A run directory as `train` leaves it: a checkpoint and the resolved config it saved."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    save_config(_resolved(run), run / "config.yaml")
    return run


def test_resume_with_another_config_is_refused_naming_the_keys(tmp_path):
    run = _saved_run(tmp_path)
    before = (run / "config.yaml").read_text()
    new = _resolved(run, "task.name=grounding_tiny", "train.lr=0.5")
    with pytest.raises(RunDirError) as err:
        check_resume(run, new)
    msg = str(err.value)
    assert "\n" not in msg and "task.name: 'counting' -> 'grounding_tiny'" in msg and "train.lr:" in msg
    assert "-> 0.5" in msg and "train.resume_force=true" in msg
    assert (run / "config.yaml").read_text() == before
    # more steps, other logging: the same run, resumed
    assert check_resume(run, _resolved(run, "train.steps=500", "train.log_every=3")) == []
    forced = _resolved(run, "train.lr=0.5", "train.resume_force=true")
    assert [k for k, _, _ in check_resume(run, forced)] == ["train.lr"]
    assert (run / "config.prev.yaml").read_text() == before


def test_differences_cover_lists_and_task_args():
    a = {"rewards": [{"verifier": "count", "weight": 1.0}], "task": {"args": {"n": 3}}, "train": {"steps": 5}}
    b = {"rewards": [{"verifier": "math", "weight": 1.0}], "task": {"args": {"n": 4}}, "train": {"steps": 9}}
    assert [k for k, _, _ in config_differences(a, b)] == ["rewards", "task.args"]


def test_cli_one_line_for_a_changed_config_and_a_busy_dir(tmp_path, capsys):
    run = _saved_run(tmp_path)
    assert main(["train", "configs/quickstart.yaml", f"output_dir={run}", "model.path=tiny", "train.lr=0.002"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mmrlvr: error: output_dir {run} holds a run with another config "
                                                f"(train.lr: 0.0002 -> 0.002); resume with the same config")
    other = _live_process()
    try:
        (run / LOCK).write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename}))
        assert main(["train", "configs/quickstart.yaml", f"output_dir={run}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"is in use by process {other.pid}" in err[0]
    finally:
        other.kill()
        other.wait()


def _rank(rank, init, run, out):
    import torch.distributed as dist

    from mmrlvr.train.run_dir import RunDirError, claim_run_dir

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    try:
        claim_run_dir(run, _resolved(run, "train.lr=0.5"), is_main=rank == 0)
        (out / f"{rank}.txt").write_text("passed")
    except RunDirError as exc:
        (out / f"{rank}.txt").write_text(str(exc))
    dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_every_rank_stops_when_the_main_one_refuses(tmp_path):
    """Only rank 0 checks; without the broadcast rank 1 would go on to the next barrier and wait forever."""
    import torch.multiprocessing as tmp

    run = _saved_run(tmp_path)
    tmp.spawn(_rank, args=(tmp_path / "init", run, tmp_path), nprocs=2, join=True)
    texts = [(tmp_path / f"{r}.txt").read_text() for r in (0, 1)]
    assert texts[0] == texts[1] and "train.lr: 0.0002 -> 0.5" in texts[0]
