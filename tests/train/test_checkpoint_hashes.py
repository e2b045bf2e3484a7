"""Checkpoints are verified by content: every file's sha256 is recorded at save and checked at
resume. A file corrupted in place at the same size (weights, optimizer, config, tokenizer, the
state itself) or a file a loader reads planted beside them is named in one line, and the run resumes from the newest
intact checkpoint, or stops naming the file when none is."""

import shutil

import pytest
import torch

from mmrlvr.train.checkpoint import CheckpointError, checkpoint_problem, latest_checkpoint, save_checkpoint
from mmrlvr.train.checkpoint_files import remove_checkpoint


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    model, processor = tiny
    root = tmp_path_factory.mktemp("run")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    for step in (1, 2):
        save_checkpoint(root, step, model, processor, opt, {"data_pos": step})
    return root


def _files(ckpt):
    return sorted(str(f.relative_to(ckpt)) for f in ckpt.rglob("*") if f.is_file())


def _flip(path, at=None):
    """Change bytes in the middle of a file, in place, same size."""
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    for j in range(i, min(i + 16, len(data))):
        data[j] ^= 0x5A
    path.write_bytes(bytes(data))


def test_intact_checkpoints_pass(run):
    assert checkpoint_problem(run / "checkpoints" / "step_2") is None
    assert latest_checkpoint(run, warn=pytest.fail).name == "step_2"
    names = _files(run / "checkpoints" / "step_2")
    assert {"model.safetensors", "config.json", "trainer_state.pt", "state.json"} <= set(names)
    assert any(n.startswith("tokenizer") for n in names)


def test_each_file_corrupted_in_place_is_named_and_the_run_falls_back(run, tmp_path):
    for name in _files(run / "checkpoints" / "step_2"):
        copy = tmp_path / name.replace("/", "_")
        shutil.copytree(run, copy)
        target = copy / "checkpoints" / "step_2" / name
        size = target.stat().st_size
        _flip(target)
        assert target.stat().st_size == size
        warned = []
        assert latest_checkpoint(copy, warn=warned.append).name == "step_1", name
        assert len(warned) == 1 and name in warned[0] and "step_2" in warned[0], (name, warned)


def test_a_planted_weight_file_is_refused(run, tmp_path):
    copy = tmp_path / "planted"
    shutil.copytree(run, copy)
    (copy / "checkpoints" / "step_2" / "pytorch_model.bin").write_bytes(b"\x80\x04planted")
    warned = []
    assert latest_checkpoint(copy, warn=warned.append).name == "step_1"
    assert "pytorch_model.bin was not there when the checkpoint was saved" in warned[0]


def test_no_intact_checkpoint_stops_naming_the_file(run, tmp_path):
    copy = tmp_path / "both"
    shutil.copytree(run, copy)
    for step in (1, 2):
        _flip(copy / "checkpoints" / f"step_{step}" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"step_2: model.safetensors changed since it was saved"):
        latest_checkpoint(copy)


def test_a_file_no_loader_reads_is_not_the_checkpoints_and_is_kept_when_it_goes(run, tmp_path):
    copy = tmp_path / "report"
    shutil.copytree(run, copy)
    ckpt = copy / "checkpoints" / "step_2"
    (ckpt / "eval.json").write_text('{"accuracy": 0.5}')
    (ckpt / "notes").mkdir()
    (ckpt / "notes" / "todo.txt").write_text("mine")
    warned = []
    assert checkpoint_problem(ckpt) is None and latest_checkpoint(copy, warn=warned.append) == ckpt and warned == []
    kept = remove_checkpoint(ckpt, warn=warned.append)  # what rotation and a redone step call
    assert kept == copy / "checkpoints" / "step_2.kept" and not ckpt.exists()
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == ["eval.json", "notes/todo.txt"]
    assert (kept / "eval.json").read_text() == '{"accuracy": 0.5}' and len(warned) == 1 and str(kept) in warned[0]
    assert latest_checkpoint(copy).name == "step_1"  # the kept folder is no checkpoint
    assert remove_checkpoint(copy / "checkpoints" / "step_1") is None  # nothing foreign: removed whole
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == ["step_2.kept"]
