"""`mmrlvr train ... model.path=tiny:<model_type>` end to end for every family: 2 GRPO steps on
images (and on video where the processor takes video), an exact resume from a checkpoint, and
the checkpoint loading back with `from_pretrained`. The default (`tiny`) runs in tests/e2e."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmrlvr.config import load_config
from mmrlvr.models.families import FAMILIES
from mmrlvr.recipe.loop import train

EVEN = Path(__file__).parent / "length_reward.py:char_length"
SMALL = ["task.train_size=8", "task.eval_size=2", "warm_start.steps=0", "rollout.prompts_per_step=2",
         "rollout.group_size=3", "rollout.max_new_tokens=5", "rollout.temperature=1.3", "train.steps=2",
         "train.save_every=1", "train.log_every=1", "train.lr=3e-3", "eval.batch_size=2", "verifier_workers=0",
         "verifier_timeout=60",  # a loaded CI machine must not turn rewards into time-outs
         # an untrained policy never counts right: a length term gives every group mixed rewards
         f"rewards=[{{verifier: count, weight: 1.0}}, {{verifier: {EVEN}, weight: 0.5}}]"]


def _run(config: str, run, model_type: str, extra=()):
    cfg = load_config(config, [*SMALL, f"output_dir={run}", f"model.path=tiny:{model_type}", *extra])
    return train(cfg)


@pytest.mark.parametrize("model_type", [f for f in FAMILIES if f != "qwen2_5_vl"])
def test_two_grpo_steps_resume_exactly_and_load(model_type, tmp_path):
    from mmrlvr.models.load import load_checkpoint
    from mmrlvr.train.checkpoint import safe_load

    run = tmp_path / "run"
    _run("configs/quickstart.yaml", run, model_type)
    first = load_file(run / "checkpoints" / "step_1" / "model.safetensors")
    second = load_file(run / "checkpoints" / "step_2" / "model.safetensors")
    assert any(not torch.equal(first[k], second[k]) for k in first), "step 2 changed nothing"
    # resume from step 1: step 2 is redone from the saved optimizer, data position and seed
    shutil.rmtree(run / "checkpoints" / "step_2")
    _run("configs/quickstart.yaml", run, model_type, ["train.resume=true"])
    again = load_file(run / "checkpoints" / "step_2" / "model.safetensors")
    for k in second:
        torch.testing.assert_close(again[k], second[k], rtol=0, atol=1e-6, msg=k)
    model, processor = load_checkpoint(str(run / "checkpoints" / "step_2"))
    assert model.config.model_type == model_type
    # the optimizer holds every parameter but those no forward reaches (LLaVA-OneVision's vision
    # tower post-layernorm), frozen in one process as under DDP, so either can resume the other
    blob = safe_load(run / "checkpoints" / "step_2" / "trainer_state.pt")
    unreached = 2 if model_type == "llava_onevision" else 0
    assert len(blob["optimizer"]["param_groups"][0]["params"]) == len(list(model.parameters())) - unreached
    model.save_pretrained(tmp_path / "resaved")  # the same checkpoint naming as the run's save
    loaded = load_file(tmp_path / "resaved" / "model.safetensors")
    assert loaded.keys() == second.keys()
    for k in second:
        torch.testing.assert_close(loaded[k], second[k], rtol=0, atol=0, msg=k)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen3_vl", "llava_onevision"])  # processors that take video
def test_two_grpo_steps_on_video(model_type, tmp_path):
    run = tmp_path / "video"
    _run("configs/video_motion_tiny.yaml", run, model_type,
         ["train.save_every=0", f"rewards=[{{verifier: choice, weight: 1.0}}, {{verifier: {EVEN}, weight: 0.5}}]"])
    assert (run / "checkpoints" / "step_2" / "model.safetensors").exists()
