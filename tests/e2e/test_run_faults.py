"""Run faults on the tiny model: a kill during the first checkpoint's save, a corrupt
newest checkpoint, and no intact checkpoint at all. The resumed run must equal an uninterrupted
one in metrics.jsonl and summary.json (timings aside)."""

import json
import shutil
from functools import partial

import pytest

import mmrlvr.recipe.loop as loop
from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.train.checkpoint import CheckpointError, latest_checkpoint, save_checkpoint
from tests.train.ckpt_stubs import JsonProcessor, SaveableLinear

SMALL = ["task.train_size=32", "task.eval_size=8", "warm_start.steps=2", "warm_start.batch_size=4",
         "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6", "train.steps=3",
         "train.save_every=2", "train.log_every=1", "eval.batch_size=8", "verifier_workers=0"]


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after the raise runs, no `except Exception` catches it."""


def _train(run, extra=()):
    return loop.train(load_config("configs/quickstart.yaml", [*SMALL, f"output_dir={run}", *extra]))


def _metrics(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and "tokens_per_s" not in k} for r in rows]


def _summary(run):
    s = json.loads((run / "summary.json").read_text())
    s["warm_start"].pop("source")  # a path inside the run directory
    assert s.pop("model_dir") == str(run / "model")  # the final policy, inside the run directory
    return {k: v for k, v in s.items() if k not in ("wall_time_s", "run_dir")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run = tmp_path_factory.mktemp("faults") / "clean"
    _train(run)
    return run


@pytest.mark.slow
def test_kill_during_the_first_save_then_resume_equals_an_uninterrupted_run(uninterrupted, tmp_path, monkeypatch):
    """A kill mid-save: metrics of steps 1-2 were written, the step-2 save died half-way."""
    run = tmp_path / "killed"

    def dies_while_saving(run_dir, step, *a, **k):
        part = run_dir / "checkpoints" / ".tmp-killed"
        part.mkdir(parents=True)
        (part / "model.safetensors").write_bytes(b"\0" * 100)  # half a model
        raise Killed()

    with monkeypatch.context() as m:
        m.setattr(loop, "save_checkpoint", dies_while_saving)
        with pytest.raises(Killed):
            _train(run)
    assert [r["step"] for r in _metrics(run)] == [0, 1, 2]  # what the kill left
    _train(run)  # the same command again
    assert not list((run / "checkpoints").glob(".tmp-*"))  # item 10
    assert _metrics(run) == _metrics(uninterrupted)  # item 9: no step written twice, same numbers
    assert _summary(run) == _summary(uninterrupted)


@pytest.mark.slow
def test_corrupt_newest_checkpoint_is_named_and_skipped(uninterrupted, tmp_path, capsys):
    """A corrupt newest checkpoint: step_3's model is truncated; the run warns, resumes from step_2, ends as before."""
    run = tmp_path / "corrupt"
    shutil.copytree(uninterrupted, run)
    (run / "summary.json").unlink()
    model = run / "checkpoints" / "step_3" / "model.safetensors"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    capsys.readouterr()
    _train(run)
    err = capsys.readouterr().err
    assert f"checkpoint {run / 'checkpoints' / 'step_3'} is corrupt (model.safetensors is" in err
    assert "resuming from step_2" in err
    assert _metrics(run) == _metrics(uninterrupted) and _summary(run) == _summary(uninterrupted)


@pytest.mark.parametrize("damage", ["empty_state", "empty_model", "missing_trainer_state", "truncated_model"])
def test_each_kind_of_damage_is_detected(tmp_path, damage):
    """No model needed: a checkpoint written by save_checkpoint, then damaged one way."""
    import torch
    from transformers import AutoTokenizer  # noqa: F401 - the processor stand-in below is a real save

    Tiny = partial(SaveableLinear, 4, 4)
    Proc = JsonProcessor

    model = Tiny()
    opt = torch.optim.AdamW(model.parameters())
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, Proc(), opt, {"data_pos": step})
    newest = tmp_path / "checkpoints" / "step_2"
    assert latest_checkpoint(tmp_path) == newest
    target = {"empty_state": "state.json", "empty_model": "model.safetensors",
              "missing_trainer_state": "trainer_state.pt", "truncated_model": "model.safetensors"}[damage]
    path = newest / target
    if damage == "missing_trainer_state":
        path.unlink()
    elif damage == "truncated_model":
        path.write_bytes(path.read_bytes()[:-1])
    else:
        path.write_bytes(b"")
    warnings = []
    assert latest_checkpoint(tmp_path, warn=warnings.append) == tmp_path / "checkpoints" / "step_1"
    assert len(warnings) == 1 and str(newest) in warnings[0] and "resuming from step_1" in warnings[0]
    (tmp_path / "checkpoints" / "step_1" / "state.json").write_text("")
    with pytest.raises(CheckpointError, match=r"no intact checkpoint in .*checkpoints \(step_2: .*; step_1: state.json"):
        latest_checkpoint(tmp_path)


def test_no_intact_checkpoint_is_one_line_from_the_cli(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_4").mkdir(parents=True)
    (run / "checkpoints" / "step_4" / "state.json").write_text("")
    assert main(["train", "configs/quickstart.yaml", *SMALL, f"output_dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mmrlvr: error: no intact checkpoint in {run / 'checkpoints'}")


def test_checkpoints_order_by_step_number_not_by_name(tmp_path):
    """step_10 is newer than step_9 (by name "step_10" < "step_9"): resuming and pruning use numbers."""
    import torch

    from mmrlvr.train.checkpoint import list_checkpoints

    Tiny = partial(SaveableLinear, 2, 2)
    Proc = JsonProcessor

    model = Tiny()
    opt = torch.optim.AdamW(model.parameters())
    for step in (9, 10, 11):  # keep 2: step_9 is the one pruned, then step_10 and step_11 remain
        save_checkpoint(tmp_path, step, model, Proc(), opt, {"data_pos": step})
    root = tmp_path / "checkpoints"
    assert list_checkpoints(tmp_path) == [root / "step_10", root / "step_11"]
    assert latest_checkpoint(tmp_path) == root / "step_11"
    (root / "step_100").mkdir()  # a bare directory: broken, so the newest intact one is chosen
    assert list_checkpoints(tmp_path)[-1] == root / "step_100"
    assert latest_checkpoint(tmp_path, warn=lambda m: None) == root / "step_11"


def test_a_step_that_fails_leaves_no_verifier_process_or_pool_thread_behind(tmp_path, monkeypatch):
    """A step that raises (a dead rollout server, a broken reward) still closes the run: the
    verifier processes are joined and the pool's manager thread is gone before the error reaches
    the caller, so nothing races the interpreter's exit hooks."""
    import multiprocessing
    import threading

    def fails_after_scoring(engine, stream, scorer, cfg, **k):
        scorer("exact", ["1"], stream.take(1, 1))  # the verifier pool has started its processes
        raise RuntimeError("the rollout server went away")

    monkeypatch.setattr(loop, "collect", fails_after_scoring)
    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(RuntimeError, match="went away"):
        _train(tmp_path / "run", ["verifier_workers=1", "warm_start.steps=0"])
    new = [t for t in threading.enumerate() if t.ident not in before and type(t).__name__ != "TMonitor"]
    for t in new:  # tqdm's monitor is its own, process-wide; a stopped thread may take a moment to end
        t.join(timeout=5)
    left = [f"{t.name} ({type(t).__name__})" for t in new if t.is_alive()]
    assert not multiprocessing.active_children()
    assert not left, left
