"""The learning-rate schedule: transformers' factors without importing transformers' optimisation
module (which imports peft, ~60 MB resident in every run)."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mmrlvr.train.schedule import lr_factor, make_scheduler

ROOT = Path(__file__).resolve().parents[2]


def _lrs(sched, opt, n):
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def _opt(lr=0.5):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


@pytest.mark.parametrize("name, warmup, total, expected", [
    # by hand: warm-up k/warmup, then 1 / (total - k) / (total - warmup) / half a cosine to 0 at `total`
    ("constant", 2, 6, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ("linear", 2, 6, [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0]),
    ("cosine", 1, 5, [0.0, 1.0, 0.5 * (1 + 2 ** -0.5), 0.5, 0.5 * (1 - 2 ** -0.5), 0.0]),
    ("linear", 0, 4, [1.0, 0.75, 0.5, 0.25, 0.0]),
])
def test_factors_by_hand(name, warmup, total, expected):
    got = [lr_factor(s, name=name, warmup_steps=warmup, total_steps=total) for s in range(len(expected))]
    assert got == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("name", ["constant", "linear", "cosine"])
@pytest.mark.parametrize("warmup, total", [(0, 1), (0, 7), (3, 7), (5, 20), (9, 4)])
def test_same_learning_rates_as_transformers(name, warmup, total):
    """Bit for bit what `transformers.get_scheduler` gave (it ran the loop before): a resumed run
    and the step reference keep their numbers."""
    from transformers import get_scheduler

    ours_opt, theirs_opt = _opt(), _opt()
    ours = make_scheduler(ours_opt, SimpleNamespace(lr_scheduler=name, warmup_steps=warmup, steps=total))
    hf_name = "constant_with_warmup" if name == "constant" else name
    theirs = get_scheduler(hf_name, theirs_opt, num_warmup_steps=warmup, num_training_steps=total)
    assert _lrs(ours, ours_opt, total + 3) == _lrs(theirs, theirs_opt, total + 3)


def test_state_round_trip_and_a_transformers_state_loads():
    """A checkpoint written with transformers' scheduler (the same LambdaLR over a partial) resumes."""
    from transformers import get_scheduler

    cfg = SimpleNamespace(lr_scheduler="linear", warmup_steps=2, steps=10)
    theirs_opt = _opt()
    theirs = get_scheduler("linear", theirs_opt, num_warmup_steps=2, num_training_steps=10)
    _lrs(theirs, theirs_opt, 4)
    opt = _opt()
    ours = make_scheduler(opt, cfg)
    ours.load_state_dict(theirs.state_dict())
    opt.param_groups[0]["lr"] = ours.get_last_lr()[0]
    assert _lrs(ours, opt, 5) == _lrs(theirs, theirs_opt, 5)


def test_unknown_schedule_is_named():
    with pytest.raises(ValueError, match="train.lr_scheduler='cosin'"):
        make_scheduler(_opt(), SimpleNamespace(lr_scheduler="cosin", warmup_steps=3, steps=5))  # at build, not after warm-up


def test_a_run_without_lora_never_imports_peft(tmp_path):
    """peft is ~60 MB resident; only LoRA needs it. A whole (tiny) run in a fresh interpreter."""
    code = f"""
import json, sys
from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train
train(load_config({str(ROOT / 'configs/quickstart.yaml')!r}, [
    "output_dir={tmp_path / 'run'}", "task.train_size=16", "task.eval_size=4", "warm_start.steps=0",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1",
    "train.save_every=0", "eval.batch_size=4", "train.lr_scheduler=cosine", "train.warmup_steps=1"]))
print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    mods = json.loads(out.stdout.strip().splitlines()[-1])
    assert "torch" in mods and "mmrlvr" in mods
    assert "peft" not in mods
