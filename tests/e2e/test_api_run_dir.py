"""`mmrlvr.run` never deletes or replaces what it did not write, and a resume through it is the same run.

Real runs of the embedded tiny model on a few in-memory rows (seconds each). What the API writes
goes to `<output_dir>/.mmrlvr_inputs/`, after the run lock is held; a user's `inputs/` folder, a
live run's inputs and the current directory stay as they are.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

import mmrlvr
from mmrlvr.config import ConfigError
from mmrlvr.train.run_dir import RunDirError


def _picture(n: int) -> Image.Image:
    img = Image.new("RGB", (56, 56), "white")
    draw = ImageDraw.Draw(img)
    for k in range(n):
        draw.ellipse([4 + 16 * k, 20, 14 + 16 * k, 30], fill="red")
    return img


def _rows(tag: str) -> list[dict]:
    return [{"picture": _picture(n), "ask": f"{tag}: how many dots?", "count": str(n)} for n in (1, 2, 3)] * 2


def short(completion, sample):
    """A reward the tests pass by value (pickled the same on every call of one process)."""
    return 1.0 if len(completion) <= 4 else 0.5


def _cfg(out, steps: int = 1, workers: int = 0) -> dict:
    return {"output_dir": str(out), "verifier_workers": workers,
            "task": {"name": "geometry", "train_size": 6, "eval_size": 2,
                     "args": {"columns": {"image": "picture", "question": "ask", "answer": "count"}, "holdout_frac": 0.3}},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4},
            "train": {"steps": steps, "log_every": 1, "save_every": 0, "log_with": []},
            "eval": {"batch_size": 4}}


def _snapshot(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _holder(run: Path) -> subprocess.Popen:
    """A live process holding the run lock of `run`, as a run in progress does."""
    code = ("import sys, time; from mmrlvr.train.run_dir import acquire_lock; acquire_lock(sys.argv[1]); "
            "print('held', flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _steps(run: Path) -> list[int]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "reward/mean" in r]


def test_a_users_own_inputs_folder_survives_mmrlvr_run(tmp_path):
    out = tmp_path / "run"
    mine = out / "inputs" / "my_data.csv"
    mine.parent.mkdir(parents=True)
    mine.write_text("question,answer\nq,1\n")
    mmrlvr.run(_cfg(out) | {"task": {"name": "counting", "train_size": 4, "eval_size": 2}},  # no in-memory inputs
               overrides=["train.allow_nonempty_output_dir=true"])  # a folder of the user's own beside the run
    assert mine.read_text() == "question,answer\nq,1\n"
    mmrlvr.run(_cfg(out), train_data=_rows("A"), rewards=[short], overrides=["train.resume=false"])
    assert mine.read_text() == "question,answer\nq,1\n" and sorted(p.name for p in (out / "inputs").iterdir()) == ["my_data.csv"]
    staged = sorted(p.name.split("-")[0] for p in (out / ".mmrlvr_inputs").iterdir())
    assert staged == ["rewards", "train"]  # what the API wrote, and nothing else


def test_a_second_run_on_a_live_runs_directory_changes_nothing(tmp_path):
    out = tmp_path / "run"
    mmrlvr.run(_cfg(out), train_data=_rows("A"), rewards=[short])
    live = _holder(out)  # the first run is alive again (resumed), holding the lock
    try:
        before = _snapshot(out)
        with pytest.raises(RunDirError, match=f"output_dir {out} is in use by process {live.pid}"):
            mmrlvr.run(_cfg(out), train_data=_rows("B"), rewards=[short, lambda c, s: 0.0])
        assert _snapshot(out) == before  # not one byte of the live run's inputs, config or checkpoint
    finally:
        live.kill()
        live.wait()


def test_output_dir_empty_is_one_line_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "mine.txt").write_text("x")
    (tmp_path / "config.yaml").write_text("mine: 1\n")
    for out in ("", "  "):
        with pytest.raises(ConfigError) as err:
            mmrlvr.run(_cfg(out), train_data=_rows("A"), rewards=[short])
        assert str(err.value) == f"output_dir={out!r}: expected a non-empty path (the run directory)"
    assert _snapshot(tmp_path) == {"config.yaml": hashlib.sha256(b"mine: 1\n").hexdigest(),
                                   "inputs/mine.txt": hashlib.sha256(b"x").hexdigest()}


def test_a_resume_through_the_api_with_other_rows_or_rewards_is_refused(tmp_path):
    out = tmp_path / "run"
    mmrlvr.run(_cfg(out, steps=2), train_data=_rows("A"), rewards=[short])
    assert _steps(out) == [1, 2]
    before = _snapshot(out)
    with pytest.raises(RunDirError) as err:
        mmrlvr.run(_cfg(out, steps=3), train_data=_rows("B"), rewards=[short])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"output_dir {out} holds a run with another config (train_data: other rows (staged ")
    assert "train.resume_force=true" in msg and "rewards" not in msg.split(";")[0]
    with pytest.raises(RunDirError, match=r"\(rewards: other reward callables \(staged [0-9a-f]{16} -> [0-9a-f]{16}\)\)"):
        mmrlvr.run(_cfg(out, steps=3), train_data=_rows("A"), rewards=[lambda c, s: 0.0])
    assert _snapshot(out) == before  # refused: the refused calls' staged folders are gone again
    # the same rows and rewards are the same folders: the run resumes from step 2
    summary = mmrlvr.run(_cfg(out, steps=3), train_data=_rows("A"), rewards=[short])
    assert summary["steps"] == 3 and _steps(out) == [1, 2, 3]


def test_staged_rewards_are_unpickled_only_while_the_run_lock_is_held(tmp_path):
    out, log = tmp_path / "run", tmp_path / "unpickled.txt"

    def note(run_dir, log_path):
        """Runs wherever the staged reward is unpickled: says who holds the run lock then."""
        import json as _json
        import os as _os
        from pathlib import Path as _Path

        lock = _Path(run_dir) / ".lock"
        holder = _json.loads(lock.read_text()).get("pid") if lock.exists() else None
        with open(log_path, "a") as f:
            f.write(f"{_os.getpid()} {holder}\n")
        return lambda completion, sample: 1.0

    class Planted:
        def __call__(self, completion, sample):
            return 1.0

        def __reduce__(self):
            return note, (str(out), str(log))

    mmrlvr.run(_cfg(out, workers=1), train_data=_rows("A"), rewards=[Planted()])
    seen = [line.split() for line in log.read_text().splitlines()]
    import os

    assert seen and all(holder == str(os.getpid()) for _, holder in seen), seen
    assert any(pid != str(os.getpid()) for pid, _ in seen)  # the worker that scores loaded it


def test_a_payload_planted_in_staged_rewards_is_refused_before_it_runs(tmp_path, capsys):
    import cloudpickle

    from mmrlvr.cli import main

    out, marker = tmp_path / "run", tmp_path / "payload_ran"
    mmrlvr.run(_cfg(out), train_data=_rows("A"), rewards=[short])
    (pkl,) = [p for p in out.rglob("short.pkl")]

    class Payload:
        def __reduce__(self):
            return Path(marker).write_text, ("ran",)

    pkl.write_bytes(cloudpickle.dumps(Payload()))
    capsys.readouterr()  # the first run's progress
    assert main(["train", str(out / "config.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not marker.exists()
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: rewards[0].verifier=") and "cannot be loaded (" in err[0]
    assert f"{pkl} was changed after it was staged (sha256 " in err[0]


def test_staged_rows_changed_in_place_are_one_line(tmp_path):
    from mmrlvr.api import as_config, prepare
    from mmrlvr.checks.validate import config_errors

    cfg = prepare(as_config(_cfg(tmp_path / "run")), train_data=_rows("A"))
    assert config_errors(cfg) == []
    (arrow,) = Path(cfg.task.args["data"]).glob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[:-8] + b"\0" * 8)  # same size, other bytes
    (line,) = config_errors(cfg)
    assert line.startswith("task.args.data='") and "\n" not in line
    assert f": expected the rows mmrlvr.run staged ({arrow} was changed after it was staged (sha256 " in line


def test_staged_changes_are_named_and_a_moved_run_directory_is_the_same_run():
    from mmrlvr.data.staged import staged_change

    a = {"data": "/old/run/.mmrlvr_inputs/train-0123456789abcdef/train", "n": 1}
    moved = {"data": "/new/place/.mmrlvr_inputs/train-0123456789abcdef/train", "n": 1}
    other = {"data": "/old/run/.mmrlvr_inputs/train-fedcba9876543210/train", "n": 1}
    assert staged_change(a, moved) == ""
    assert staged_change(a, other) == "train_data: other rows (staged 0123456789abcdef -> fedcba9876543210)"
    assert staged_change(a, {**other, "n": 2}) is None  # another difference too: named as a config key
    assert staged_change({"data": "inputs/train"}, {"data": "inputs/other"}) is None


def test_another_process_of_a_launch_names_the_folders_the_main_one_writes(tmp_path):
    """Rank > 0 stages into scratch only to learn the content names; rank 0 writes the same names."""
    from mmrlvr.api import as_config, check_inputs, stage
    from mmrlvr.data.staged import STAGED

    cfg = as_config(_cfg(tmp_path / "run"))
    inputs = check_inputs(cfg, _rows("A"), _rows("B")[:2], [short])
    main, _ = stage(cfg, inputs, tmp_path / "run" / STAGED)
    other, created = stage(cfg, inputs, tmp_path / "scratch", named_root=tmp_path / "run" / STAGED)
    assert other.task.args == main.task.args and other.rewards == main.rewards and len(created) == 3
    again, created = stage(cfg, inputs, tmp_path / "run" / STAGED)  # the same inputs: found, not rewritten
    assert again.task.args == main.task.args and created == []
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "run" / STAGED).iterdir()) == ["eval", "rewards", "train"]
