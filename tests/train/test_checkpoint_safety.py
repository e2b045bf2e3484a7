"""Resuming never runs code planted in a checkpoint, and still restores every state exactly."""

import os
from functools import partial
import random

import numpy as np
import pytest
import torch

from mmrlvr.train.checkpoint import CheckpointError, load_trainer_state, safe_load, save_checkpoint
from tests.train.ckpt_stubs import JsonProcessor, SaveableLinear


Tiny = partial(SaveableLinear, 3, 2)
Proc = JsonProcessor


class Planted:
    """Unpickling this writes a marker file: the proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint(tmp_path):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.w(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
    sched.step()
    return model, opt, sched, save_checkpoint(tmp_path, 7, model, Proc(), opt, {"data_pos": 5}, scheduler=sched)


def test_states_round_trip_through_the_safe_loader(tmp_path):
    model, opt, sched, ckpt = _checkpoint(tmp_path)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    expect = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_checkpoint(tmp_path, 8, model, Proc(), opt, {"data_pos": 6}, scheduler=sched)  # states before the draws
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    opt2 = torch.optim.AdamW(Tiny().parameters(), lr=1.0)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 0.5 ** s)
    state = load_trainer_state(tmp_path / "checkpoints" / "step_8", opt2, sched2)
    assert state["step"] == 8 and state["data_pos"] == 6
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expect
    # lr 3e-3 after one scheduler step of 0.5 ** 1: 1.5e-3
    assert opt2.param_groups[0]["lr"] == pytest.approx(1.5e-3) and sched2.last_epoch == 1
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


@pytest.mark.parametrize("target", ["trainer_state.pt", "optimizer_rank0.pt", "rng_rank1.pt"])
def test_a_planted_object_does_not_run(tmp_path, target):
    """Each .pt file a resume reads, with a planted object: refused in one line, the code never runs."""
    _, _, _, ckpt = _checkpoint(tmp_path)
    marker = tmp_path / "ran"
    planted = {"rng": Planted(marker), "optimizer": Planted(marker)}
    torch.save(planted, ckpt / target)
    with pytest.raises(CheckpointError) as err:
        safe_load(ckpt / target)
    assert not marker.exists()
    msg = str(err.value)
    assert "\n" not in msg and str(ckpt / target) in msg and "posix.system" in msg
    if target == "trainer_state.pt":  # the resume path itself
        with pytest.raises(CheckpointError):
            load_trainer_state(ckpt, torch.optim.AdamW(Tiny().parameters()))
        assert not marker.exists()


def test_a_checkpoint_written_before_still_resumes(tmp_path):
    """Earlier checkpoints pickled numpy's RNG state as an array: allowed, and restored exactly."""
    model, opt, sched, ckpt = _checkpoint(tmp_path)
    random.seed(4), np.random.seed(5), torch.manual_seed(6)
    old_rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    expect = (random.random(), np.random.rand(), torch.rand(1).item())
    torch.save({"rng": old_rng, "optimizer": opt.state_dict()}, ckpt / "trainer_state.pt")
    state = ckpt / "state.json"  # the recorded size must match the rewritten file
    import json

    meta = json.loads(state.read_text())
    meta["files"]["trainer_state.pt"] = (ckpt / "trainer_state.pt").stat().st_size
    state.write_text(json.dumps(meta))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    load_trainer_state(ckpt, torch.optim.AdamW(Tiny().parameters()))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expect
