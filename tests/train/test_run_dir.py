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


def _holder(run):
    """Another live process that holds the lock of `run` (returns once it does)."""
    code = ("import sys, time; from mmrlvr.train.run_dir import acquire_lock; acquire_lock(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_lock_names_the_pid_and_refuses_a_second_run(tmp_path):
    path = acquire_lock(tmp_path)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    release_lock(tmp_path)
    assert not path.exists()
    other = _holder(tmp_path)
    try:
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


def test_a_killed_holders_lock_is_taken_over_and_another_hosts_is_refused(tmp_path):
    holder = _holder(tmp_path)
    holder.kill()  # SIGKILL: no atexit, the file stays behind naming it; the kernel frees the flock
    holder.wait()
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == holder.pid
    said = []
    acquire_lock(tmp_path, warn=said.append)
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    assert len(said) == 1 and f"from process {holder.pid}, which is no longer running" in said[0]
    assert acquire_lock(tmp_path) == tmp_path / LOCK  # held already: train() after mmrlvr.run locked
    release_lock(tmp_path)
    assert not (tmp_path / LOCK).exists()
    (tmp_path / LOCK).write_text(json.dumps({"pid": 12, "host": "elsewhere"}))
    with pytest.raises(RunDirError, match=r"locked by process 12 on host elsewhere .*delete that file"):
        acquire_lock(tmp_path)
    assert json.loads((tmp_path / LOCK).read_text())["host"] == "elsewhere"


def _resolved(run, *overrides):
    """The config as `train` saves it: preset and defaults written out."""
    import dataclasses

    from mmrlvr.checks.resolve import resolve_algo

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
    # named to the very key, through lists of mappings and task arguments
    assert config_differences(a, b) == [("rewards[0].verifier", "count", "math"), ("task.args.n", 3, 4)]
    assert config_differences({"rewards": []}, {"rewards": [{"verifier": "count"}]}) == [
        ("rewards[0].verifier", None, "count")]


def test_a_run_saved_with_the_old_bad_media_default_resumes():
    """Saved before the one bad-row rule: task.max_bad_media_frac 0.01 and no task.max_bad_frac.
    The limit says when to stop, not what is trained on, so a resume may change it."""
    saved = {"task": {"name": "counting", "max_bad_media_frac": 0.01, "args": {}}}
    now = {"task": {"name": "counting", "max_bad_frac": 0.25, "max_bad_media_frac": None, "args": {}}}
    assert config_differences(saved, now) == []
    assert config_differences(saved, {"task": {**now["task"], "name": "chart"}}) == [("task.name", "counting", "chart")]


def test_a_dbb_run_saved_before_algo_advantage_could_name_dbb_resumes(tmp_path):
    """Saved with sample_efficiency.dbb.enabled and its preset's algo.advantage (grpo): it trained with
    dbb, which the resolved config now also says in algo.advantage. Nothing else is forgiven."""
    from mmrlvr.checks.resolve import resolve_config

    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    old = _resolved(run, "sample_efficiency.dbb.enabled=true")  # resolved as before: algo.advantage grpo
    assert old.algo.advantage == "grpo"
    save_config(old, run / "config.yaml")
    now = resolve_config(load_config("configs/quickstart.yaml", [f"output_dir={run}", "sample_efficiency.dbb.enabled=true"]))
    assert now.algo.advantage == "dbb" and check_resume(run, now) == []
    named = resolve_config(load_config("configs/quickstart.yaml", [f"output_dir={run}", "algo.advantage=dbb"]))
    assert check_resume(run, named) == []  # the same run, however DBB is named
    with pytest.raises(RunDirError, match=r"sample_efficiency.dbb.lam: 0.9 -> 0.5"):
        check_resume(run, resolve_config(load_config("configs/quickstart.yaml", [
            f"output_dir={run}", "sample_efficiency.dbb.enabled=true", "sample_efficiency.dbb.lam=0.5"])))
    off = tmp_path / "off"
    (off / "checkpoints" / "step_2").mkdir(parents=True)
    save_config(_resolved(off), off / "config.yaml")  # DBB off, grpo: turning it on is another run
    with pytest.raises(RunDirError, match=r"algo.advantage: 'grpo' -> 'dbb'"):
        check_resume(off, resolve_config(load_config("configs/quickstart.yaml", [f"output_dir={off}", "algo.advantage=dbb"])))


def test_a_refused_resume_names_every_changed_key_with_full_values(tmp_path):
    """A long path that differs at its end is printed whole, a mapping inside a list is named to
    its key (never an elided dict), and past eight changes the rest are still named."""
    long_old = "/data/" + "x" * 70 + "/model_a"
    run = tmp_path / "run"
    (run / "checkpoints" / "step_2").mkdir(parents=True)
    save_config(_resolved(run, f"task.args.path={long_old}", "task.args.crops=[{size: 8, mode: a}, 3]"),
                run / "config.yaml")
    changed = [f"task.args.path={long_old[:-1]}b", "task.args.crops=[{size: 8, mode: b}, 3]", "seed=7",
               "train.lr=0.5", "rollout.top_k=5", "rollout.temperature=0.5", "model.lora_rank=2",
               "algo.kl_coef=0.25", "train.weight_decay=0.125", "train.warmup_steps=3"]
    with pytest.raises(RunDirError) as err:
        check_resume(run, _resolved(run, *changed))
    msg = str(err.value)
    assert f"task.args.path: '{long_old}' -> '{long_old[:-1]}b'" in msg
    assert "task.args.crops[0].mode: 'a' -> 'b'" in msg and "task.args.crops[1]" not in msg
    assert "; and train.warmup_steps, train.weight_decay); resume with" in msg, msg


def test_cli_one_line_for_a_changed_config_and_a_busy_dir(tmp_path, capsys):
    run = _saved_run(tmp_path)
    assert main(["train", "configs/quickstart.yaml", f"output_dir={run}", "model.path=tiny", "train.lr=0.002"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mmrlvr: error: output_dir {run} holds a run with another config "
                                                f"(train.lr: 0.0002 -> 0.002); resume with the same config")
    other = _holder(run)
    try:
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


def _race(barrier, root, rounds, results, who):
    """One of the lockers: each round all call acquire_lock at the same instant (a Barrier), say
    whether they got the lock, wait until all have said, then let it go."""
    for r in range(rounds):
        run = root / f"r{r}"
        barrier.wait()
        try:
            acquire_lock(run, warn=lambda msg: None)
            got = True
        except RunDirError:
            got = False
        results.put((r, who, got))
        barrier.wait()  # all have tried before the holder releases
        if got:
            release_lock(run)


@pytest.mark.timeout(300)
def test_runs_started_at_the_same_instant_never_both_hold_the_lock(tmp_path):
    """The lock file must appear with its owner already in it (or be held by the kernel): a lock
    created empty and filled in after lets a second starter call the owner dead and take it too."""
    import multiprocessing as mp

    ctx, rounds, n = mp.get_context("fork"), 200, 3
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(barrier, tmp_path, rounds, results, who)) for who in range(n)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(n * rounds):
        r, who, held = results.get(timeout=120)
        got.setdefault(r, []).append(held)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    many = [r for r, held in got.items() if sum(held) > 1]
    none = [r for r, held in got.items() if sum(held) == 0]
    assert not many and not none, f"several held the lock in {len(many)} of {rounds} rounds, none in {len(none)}"


def test_clearing_a_run_dir_removes_only_what_a_run_wrote(tmp_path):
    from mmrlvr.train.run_dir_paths import clear_run_dir, holds_run

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_text("mine")
    (tmp_path / "config.yaml").write_text("mine: 1\n")  # a user's file of the name a run writes
    (tmp_path / "notes.txt").write_text("mine")
    assert not holds_run(tmp_path)
    clear_run_dir(tmp_path)  # no earlier run of ours: nothing is removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "model", "notes.txt"]
    save_config(load_config("configs/quickstart.yaml", [f"output_dir={tmp_path}"]), tmp_path / "config.yaml")
    assert holds_run(tmp_path)
    clear_run_dir(tmp_path)  # an earlier run's files go; a file of another name stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
