"""End-to-end runs of the loop on the tiny model: a few steps, files, resume."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmrlvr.config import load_config
from mmrlvr.recipe.loop import train

SMALL = [
    "task.train_size=64", "task.eval_size=16", "warm_start.steps=4", "warm_start.batch_size=8",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
    "train.steps=3", "train.save_every=2", "train.log_every=1", "train.lr=1e-3", "eval.batch_size=16",
    # a user verifier from a plain .py file, weighted with the task's own
    f"rewards=[{{verifier: {Path(__file__).parent / 'user_verifier.py'}:even_length, weight: 1.0}}, {{verifier: count, weight: 1.0}}]",
]


def _run(tmp_path, name, extra=()):
    cfg = load_config("configs/quickstart.yaml", SMALL + [f"output_dir={tmp_path / name}", *extra])
    return train(cfg), tmp_path / name


def test_short_run_writes_everything_and_changes_weights(tmp_path):
    summary, run = _run(tmp_path, "a")
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "samples/step_1.jsonl",
                 "warm_start/model.safetensors", "checkpoints/step_3/model.safetensors"):
        assert (run / name).exists(), name
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2, 3]
    step1 = next(r for r in rows if "reward/mean" in r)
    for key in ("reward/count", "reward/even_length", "reward/even_length/length", "loss/policy", "actor/entropy", "rollout/mixed_group_frac", "time/step"):
        assert key in step1
    # the held-out evaluation uses the configured terms (the user's verifier too), before and after RL
    for key in ("eval/counting/reward", "eval/counting/accuracy", "eval/counting/even_length"):
        assert key in rows[0] and key in rows[-1]
    saved = json.loads((run / "summary.json").read_text())
    assert set(saved) >= {"eval_before", "eval_after"} and 0.0 <= saved["eval_after"]["accuracy"] <= 1.0
    assert saved["eval_before"]["n"] == 16
    before = load_file(run / "warm_start" / "model.safetensors")
    after = load_file(run / "checkpoints" / "step_3" / "model.safetensors")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "RL did not change any parameter"
    sample = json.loads((run / "samples" / "step_1.jsonl").read_text().splitlines()[0])
    assert {"completion", "score", "reason", "reference"} <= set(sample)


def test_stopped_run_with_kl_resumes_exactly(tmp_path):
    """A KL preset: the resumed run must regularise towards the warm-started policy, as the
    uninterrupted one does, not towards the checkpoint it resumed from (see also the SIGKILL test
    in test_resume_kill.py)."""
    kl = ["algo.algorithm=reinforce_pp"]
    _, straight = _run(tmp_path, "straight", kl)
    _run(tmp_path, "resumed", [*kl, "train.steps=2"])  # stops after the step-2 checkpoint
    with open(tmp_path / "resumed" / "metrics.jsonl", "a") as f:  # a killed run's line after it
        f.write(json.dumps({"step": 3, "reward/mean": -1.0}) + "\n")
    _, resumed = _run(tmp_path, "resumed", kl)  # same dir, 3 steps: continues at step 3
    a = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in b if "reward/mean" in r] == [1, 2, 3]  # the stale step-3 line is gone
    step3 = lambda rows: [r for r in rows if r["step"] == 3 and "reward/mean" in r][-1]  # noqa: E731
    assert step3(a)["reward/mean"] == step3(b)["reward/mean"]
    assert step3(a)["loss/policy"] == pytest.approx(step3(b)["loss/policy"], abs=1e-6)
    assert step3(a)["loss/kl"] > 0 and step3(a)["loss/kl"] == pytest.approx(step3(b)["loss/kl"], rel=1e-5)
    wa = load_file(straight / "checkpoints" / "step_3" / "model.safetensors")
    wb = load_file(resumed / "checkpoints" / "step_3" / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


@pytest.mark.parametrize("preset,extra", [
    ("dapo", ["algo.max_rounds=2"]),
    ("gspo", []),
    ("reinforce_pp", ["algo.grad_accum=2"]),  # k2 KL to a frozen reference copy
])
def test_presets_end_to_end_do_what_they_promise(tmp_path, preset, extra):
    """Two steps through the whole loop; what each preset changes shows in its numbers
    (the update mechanics per preset are pinned in tests/train/test_presets.py)."""
    summary, run = _run(tmp_path, preset, [f"algo.algorithm={preset}", "train.steps=2", *extra])
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if "reward/mean" in r]
    assert len(step) == 2
    if preset == "dapo":
        # dynamic sampling: a second round exactly when the first left groups with equal rewards
        for r in step:
            assert r["rollout/rounds"] == (1 if r["rollout/mixed_group_frac"] == 1.0 else 2)
    if preset == "reinforce_pp":
        # step 1: the policy is the reference (KL 0); step 2 follows an update, so KL > 0
        assert step[0]["loss/kl"] == pytest.approx(0.0, abs=1e-6) and step[1]["loss/kl"] > 0.0
    if preset == "gspo":
        # four mini-batch updates per rollout batch: later ones see a moved policy, ratios leave 1
        assert all(r["actor/approx_kl"] > 0 for r in step)


def test_lora_run_with_kl_to_the_adapter_free_base_and_resume(tmp_path):
    """LoRA trains only the adapter; the KL reference is the base model with the adapter off."""
    # no warm start: it would train the adapter too, and the reference is the adapter-free base
    lora = ["model.lora_rank=4", "model.lora_alpha=8", "algo.kl_coef=0.05", "train.lr=5e-3", "warm_start.steps=0"]
    _, run = _run(tmp_path, "lora", [*lora, "train.steps=2"])
    assert (run / "checkpoints" / "step_2" / "adapter_config.json").exists()
    summary, run = _run(tmp_path, "lora", [*lora, "train.steps=3"])  # resumes from the adapter checkpoint
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    step = {r["step"]: r for r in rows if "reward/mean" in r}
    assert sorted(step) == [1, 2, 3]
    assert step[1]["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # adapter starts as a no-op
    assert step[3]["loss/kl"] > 0.0
    assert 0.0 <= summary["eval_after"]["accuracy"] <= 1.0
