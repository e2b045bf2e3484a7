"""A run deletes only what it wrote: fault probes through the real CLI and API on the tiny model.

A model or warm start read from inside the paths a run clears, a report written into a checkpoint,
a stray file in a checkpoint, a directory of someone else's files used as output_dir: each is
refused with one line and exit status 2 before anything is deleted, or kept through the run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import mmrlvr
from mmrlvr.cli import main
from mmrlvr.train.checkpoint import CheckpointError, checkpoint_problem, latest_checkpoint
from mmrlvr.train.run_dir import RunDirError

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
SMALL = ["task.train_size=16", "task.eval_size=4", "warm_start.steps=0", "rollout.prompts_per_step=2",
         "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=2", "train.save_every=1",
         "train.log_every=1", "train.log_with=[]", "eval.batch_size=4", "verifier_workers=0"]


def _snapshot(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, argv) -> str:
    """Run the CLI; it must exit 2 with exactly one error line, which is returned."""
    capsys.readouterr()
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mmrlvr: error:")]
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """A finished run: model/, checkpoints/step_1 and step_2, config.yaml, metrics.jsonl."""
    run = tmp_path_factory.mktemp("earlier") / "run"
    assert main(["train", CONFIG, *SMALL, f"output_dir={run}"]) == 0
    assert (run / "model").is_dir() and [p.name for p in sorted((run / "checkpoints").iterdir())] == ["step_1", "step_2"]
    return run


@pytest.fixture
def run(earlier, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(earlier, copy)
    return copy


@pytest.mark.parametrize("key,inside", [("model.path", "model"), ("model.path", "checkpoints/step_2"),
                                        ("warm_start.checkpoint", "checkpoints/step_2")])
def test_a_fresh_run_reading_from_its_own_run_files_is_refused_before_anything_is_deleted(run, capsys, key, inside):
    before = _snapshot(run)
    line = _refused(capsys, ["train", CONFIG, *SMALL, f"output_dir={run}", "train.resume=false",
                             f"{key}={run / inside}", "warm_start.steps=1"])
    assert f"{key}: {run / inside} lies inside {run / inside.split('/')[0]}" in line, line
    assert _snapshot(run) == before  # the earlier run's model and every checkpoint are still there


def test_a_refused_resume_says_what_starting_over_throws_away(run, capsys):
    line = _refused(capsys, ["train", CONFIG, *SMALL, f"output_dir={run}", "train.lr=0.5"])
    assert "train.resume=false, which starts over and deletes checkpoints/, model/" in line and str(run) in line


def test_no_intact_checkpoint_says_what_starting_over_throws_away(run):
    for step in (1, 2):
        (run / "checkpoints" / f"step_{step}" / "trainer_state.pt").write_bytes(b"")
    with pytest.raises(CheckpointError) as err:
        latest_checkpoint(run, warn=lambda _: None)
    assert f"train.resume=false, which starts over and deletes checkpoints/, model/ and the rest of the earlier run in {run}" in str(err.value)


def test_eval_writes_its_report_beside_the_checkpoint_never_inside(run, capsys):
    ckpt = run / "checkpoints" / "step_2"
    before = _snapshot(ckpt)
    assert main(["eval", CONFIG, *SMALL, "--checkpoint", str(ckpt)]) == 0
    report = json.loads((run / "checkpoints" / "step_2.eval.json").read_text())
    assert report["n"] == 4 and report["checkpoint"] == str(ckpt)
    assert _snapshot(ckpt) == before and checkpoint_problem(ckpt) is None
    assert latest_checkpoint(run) == ckpt  # the report is no checkpoint and breaks none


@pytest.mark.parametrize("name", ["model.safetensors", "eval.json", "sub/report.json"])
def test_eval_out_inside_a_checkpoint_is_refused_before_anything_loads(run, capsys, name):
    ckpt = run / "checkpoints" / "step_2"
    before = _snapshot(ckpt)
    line = _refused(capsys, ["eval", CONFIG, *SMALL, "--checkpoint", str(ckpt), "--out", str(ckpt / name)])
    assert f"inside the checkpoint {ckpt}" in line and f"--out {ckpt}.eval.json" in line, line
    assert _snapshot(ckpt) == before
    # another run's checkpoint is a checkpoint too
    line = _refused(capsys, ["eval", CONFIG, *SMALL, "--checkpoint", "tiny", "--out", str(ckpt / name)])
    assert f"inside the checkpoint {ckpt}" in line and _snapshot(ckpt) == before


def test_merge_into_the_checkpoint_it_reads_is_refused(run, capsys):
    ckpt = run / "checkpoints" / "step_2"
    before = _snapshot(ckpt)
    for out in (ckpt, ckpt / "merged"):
        line = _refused(capsys, ["merge", str(ckpt), str(out)])
        assert f"out {out}: inside the checkpoint {ckpt}" in line and f"out {ckpt}-merged" in line, line
    assert _snapshot(ckpt) == before


def test_a_stray_file_in_a_checkpoint_neither_breaks_it_nor_is_deleted_by_the_resume(run, capsys):
    stray = run / "checkpoints" / "step_2" / "eval.json"
    stray.write_text('{"mine": 1}')
    (run / "checkpoints" / "step_1" / "notes.txt").write_text("keep me")
    warned = []
    assert latest_checkpoint(run, warn=warned.append).name == "step_2" and warned == []  # no fall back a step
    assert main(["train", CONFIG, *SMALL, f"output_dir={run}", "train.steps=4"]) == 0
    state = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in state if "reward/mean" in r] == [1, 2, 3, 4]  # steps 1-2 were not redone
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1.kept", "step_2.kept", "step_3", "step_4"]
    assert (run / "checkpoints" / "step_2.kept" / "eval.json").read_text() == '{"mine": 1}'
    assert (run / "checkpoints" / "step_1.kept" / "notes.txt").read_text() == "keep me"
    assert _snapshot(run / "checkpoints" / "step_1.kept") == {"notes.txt": hashlib.sha256(b"keep me").hexdigest()}


def _foreign(folder: Path) -> Path:
    """A directory of a user's files that no run wrote, some named like a run's."""
    for name, text in {"notes.txt": "mine", "model/weights.bin": "my weights", "config.yaml": "mine: 1\n",
                       "metrics.jsonl": '{"mine": 1}\n', "samples/s.txt": "mine"}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("resume", ["true", "false"])
def test_a_directory_of_someone_elses_files_is_refused_and_left_as_it_was(tmp_path, capsys, resume):
    out = _foreign(tmp_path / "mine")
    before = _snapshot(out)
    line = _refused(capsys, ["train", CONFIG, *SMALL, f"output_dir={out}", f"train.resume={resume}"])
    assert f"output_dir {out} is not empty" in line and "train.allow_nonempty_output_dir=true" in line, line
    # allowed beside other files, never over a file of a name the run writes
    line = _refused(capsys, ["train", CONFIG, *SMALL, f"output_dir={out}", f"train.resume={resume}",
                             "train.allow_nonempty_output_dir=true"])
    assert "config.yaml, metrics.jsonl, model/, samples/" in line and "no mmrlvr run wrote" in line, line
    assert _snapshot(out) == before and not (out / ".lock").exists()


def test_allowed_beside_other_files_a_run_keeps_them_and_a_fresh_run_clears_only_its_own(tmp_path, capsys):
    out = tmp_path / "shared"
    (out / "data").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    (out / "data" / "rows.csv").write_text("a,b\n")
    argv = ["train", CONFIG, *SMALL, f"output_dir={out}", "train.steps=1", "train.allow_nonempty_output_dir=true"]
    assert main(argv) == 0
    assert main([*argv, "train.resume=false"]) == 0  # the earlier run is ours: cleared; the user's files are not
    assert (out / "notes.txt").read_text() == "mine" and (out / "data" / "rows.csv").read_text() == "a,b\n"
    assert (out / "model").is_dir() and (out / "checkpoints" / "step_1").is_dir()


def test_mmrlvr_run_in_a_non_empty_current_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_script.py").write_text("print('mine')\n")
    with pytest.raises(RunDirError, match=r"^output_dir \. is not empty \(my_script\.py\) and holds no earlier mmrlvr run"):
        mmrlvr.run(CONFIG, overrides=[*SMALL, "output_dir=.", "train.steps=1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_script.py"]
