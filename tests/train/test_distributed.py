"""Two real processes (torchrun, gloo, CPU) against one: the same global batch and seed give the
same loss and the same weights after a step, the ranks see different prompts, and a batch that
mixes image, video and text-only prompts does not hang even when a rank holds no media."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.train import dist_worker

ROOT = Path(__file__).resolve().parents[2]


def _torchrun(args: list[str], nproc: int = 2, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--standalone", *args]  # rendezvous on a free loopback port
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    proc = _torchrun([str(ROOT / "tests/train/dist_worker.py"), str(tiny_dir), str(out / "two")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    one = dist_worker.run(str(tiny_dir), str(out / "one"))  # the same code without a process group
    two = json.loads((out / "two" / "result.json").read_text())
    return one, two, torch.load(out / "one" / "delta.pt"), torch.load(out / "two" / "delta.pt")


def test_two_processes_update_equals_one_process_update(runs):
    one, two, d1, d2 = runs
    assert (one["world"], two["world"]) == (1, 2)
    # the global token-mean loss: rank 1's zero-advantage tokens count in the denominator
    assert abs(one["loss"]) > 1e-3
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    assert two["entropy"] == pytest.approx(one["entropy"], rel=1e-5)
    assert two["updated"] == pytest.approx(one["updated"]) == 0.5  # 8 of 16 rows have signal
    moved = [k for k in d1 if d1[k].abs().max() > 1e-4]
    assert any("visual" in k for k in moved) and any("language_model" in k for k in moved)
    for k in d1:  # every weight moved by the same amount (SGD: the step is the gradient)
        torch.testing.assert_close(d2[k], d1[k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{k}: {m}")


def test_a_token_budget_keeps_ranks_in_step_and_equals_one_process(tiny_dir, tmp_path):
    """train.micro_batch_tokens under two processes: rank 0 packs its 8 rows with signal into
    micro-batches, rank 1 has none (zero advantage) and runs as many zero-weight passes; the
    no-grad forwards (rank 1's text-only rows need fewer) are padded alike. Nothing hangs, and
    the update and the log-probs are the one-process ones."""
    over = ["train.micro_batch_tokens=50"]
    proc = _torchrun([str(ROOT / "tests/train/dist_worker.py"), str(tiny_dir), str(tmp_path / "two"), *over])
    assert proc.returncode == 0, proc.stderr[-4000:]
    one = dist_worker.run(str(tiny_dir), str(tmp_path / "one"), overrides=over)
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    # 4 micro-batches for the 8 rows with signal in one process; on each of two ranks the same 4
    assert one["passes"] == [4] and two["passes"] == [4, 4] and two["micro_batches"] == 4
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5) and abs(one["loss"]) > 1e-3
    torch.testing.assert_close(torch.tensor(two["logprobs"]), torch.tensor(one["logprobs"]), rtol=1e-5, atol=1e-5)
    d1, d2 = torch.load(tmp_path / "one" / "delta.pt"), torch.load(tmp_path / "two" / "delta.pt")
    assert max(v.abs().max() for v in d1.values()) > 1e-4
    for k in d1:
        torch.testing.assert_close(d2[k], d1[k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{k}: {m}")


def test_two_bf16_processes_update_the_float32_masters_as_one_process(tiny_dir, tmp_path):
    """bf16 forwards, float32 masters: the same global batch gives the same master deltas in one
    process and two (to bf16 rounding: DDP averages the bf16 gradients), all float32."""
    proc = _torchrun([str(ROOT / "tests/train/dist_worker.py"), str(tiny_dir), str(tmp_path / "two"), "bfloat16"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    one = dist_worker.run(str(tiny_dir), str(tmp_path / "one"), "bfloat16")
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    d1, d2 = torch.load(tmp_path / "one" / "delta.pt"), torch.load(tmp_path / "two" / "delta.pt")
    assert (one["world"], two["world"]) == (1, 2) and abs(one["loss"]) > 1e-3
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)  # the forwards are the same bf16 arithmetic
    trained = [k for k in d1 if d1[k].abs().max() > 0]
    assert any("visual" in k for k in trained) and any("language_model" in k for k in trained)
    for k in trained:
        assert d1[k].dtype == d2[k].dtype == torch.float32
        # SGD at lr 1: the delta is the gradient; bf16 gradients summed in another order differ by
        # bf16's rounding (2^-8 relative), far below the update itself
        torch.testing.assert_close(d2[k], d1[k], rtol=2e-2, atol=2e-2 * float(d1[k].abs().max()),
                                   msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("model_type", ["gemma3", "llava_onevision"])
def test_other_families_train_on_two_ranks_with_a_rank_without_media(model_type, tmp_path):
    """Rank 1 holds only text prompts: its vision tower and projector must still send (zero)
    gradients, from the blank image its processor encoded, or DDP would wait for them."""
    path = f"tiny:{model_type}"
    one = dist_worker.run(path, str(tmp_path / "one"))  # first: builds the tiny model the two ranks load
    proc = _torchrun([str(ROOT / "tests/train/dist_worker.py"), path, str(tmp_path / "two")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert two["world"] == 2 and two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    d1, d2 = torch.load(tmp_path / "one" / "delta.pt"), torch.load(tmp_path / "two" / "delta.pt")
    # a media parameter moved (the tiny gemma3's projector starts at zero, as transformers initialises
    # it, so its vision tower gets no gradient on the first step; the projector does)
    assert any(k.startswith("model.") and ".language_model." not in k and d1[k].abs().max() > 1e-4 for k in d1)
    for k in d1:
        torch.testing.assert_close(d2[k], d1[k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{k}: {m}")


@pytest.mark.slow
def test_llava_onevision_trains_on_two_ranks_with_prompts_without_media(tmp_path):
    """`mmrlvr train` under torchrun with LLaVA-OneVision on image and text-only prompts: its vision
    tower's post-layernorm is never used, so DDP stops at the second forward unless the loop
    freezes it first (and says so), and a rank whose prompt has no image must still run the tower
    on the blank image the loop encoded, or DDP waits for its gradients."""
    from mmrlvr.models.load import load_policy

    load_policy("tiny:llava_onevision")  # built once here, not by two ranks at the same time
    out = tmp_path / "run"
    length = ROOT / "tests/models/length_reward.py:char_length"  # mixed rewards: the update runs
    proc = _torchrun(["-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", f"output_dir={out}",
                      "model.path=tiny:llava_onevision", "task.name=tests.train.mixed_media_task", "warm_start.steps=0",
                      "task.train_size=16", "task.eval_size=2", "eval.batch_size=2", "rollout.prompts_per_step=2",
                      "rollout.group_size=2", "rollout.max_new_tokens=3", "rollout.temperature=1.3", "train.steps=4",
                      "train.save_every=0", "verifier_workers=0", "train.resume=false",
                      f"rewards=[{{verifier: count, weight: 1.0}}, {{verifier: {length}, weight: 0.5}}]"])
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines() if "rank" in line)[-3000:]
    assert "frozen 2 media parameter(s) no forward reaches" in proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2, 3, 4]


def test_ranks_draw_different_prompts_from_one_stream(runs):
    one, two, _, _ = runs
    rank0, rank1 = two["ids"]
    assert len(rank0) == len(rank1) == 2 and not set(rank0) & set(rank1)
    # the two shards are, in order, the global draw of the one-process run
    assert rank0 + rank1 == two["expected_ids"] == one["ids"][0]
    assert two["stream_pos"] == one["stream_pos"] == 4  # every rank's stream advanced by the global batch


@pytest.mark.slow
def test_two_process_run_checkpoints_load_in_one_process_and_resume(tmp_path):
    """`mmrlvr train` under torchrun: rank 0 alone writes the run directory; the checkpoint is a
    from_pretrained directory; the run resumes under the same launcher and continues the steps."""
    from mmrlvr.models.load import load_policy

    out = tmp_path / "run"
    base = ["-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", f"output_dir={out}", "warm_start.steps=0",
            "task.train_size=64", "task.eval_size=4", "eval.batch_size=4", "rollout.prompts_per_step=4",
            "rollout.group_size=2", "rollout.max_new_tokens=4", "verifier_workers=0", "train.save_every=1"]
    first = _torchrun([*base, "train.steps=2", "train.resume=false"])
    assert first.returncode == 0, "\n".join(l for l in first.stderr.splitlines() if "[rank1]" in l)[-3000:]
    state = json.loads((out / "checkpoints" / "step_2" / "state.json").read_text())
    assert state["world_size"] == 2 and state["source"]["pos"] == 8  # 2 steps x 4 global prompts
    second = _torchrun([*base, "train.steps=3", "train.resume=true"])
    assert second.returncode == 0, second.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2, 3]  # one writer, no step twice
    assert json.loads((out / "checkpoints" / "step_3" / "state.json").read_text())["source"]["pos"] == 12
    model, _ = load_policy(str(out / "checkpoints" / "step_3"))  # one process, no launcher
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.slow
def test_fsdp2_checkpoints_load_in_one_process_and_resume(tiny_dir, tmp_path):
    """FSDP2 (`fully_shard`, 2 gloo processes): the checkpoint is the gathered full weights as a
    from_pretrained directory that one process loads to the same weights and log-probs, and a run
    resumed from step 1 under the same launcher ends at step 2 exactly where an unbroken run does
    (AdamW moments restored from the per-rank optimizer shards)."""
    from mmrlvr.models.load import load_policy
    from tests.train.fsdp2_worker import inputs

    def launch(run: Path, steps: int, *extra: str) -> dict:
        proc = _torchrun([str(ROOT / "tests/train/fsdp2_worker.py"), str(tiny_dir), str(run), str(steps), *extra])
        assert proc.returncode == 0, "\n".join(l for l in proc.stderr.splitlines() if "[rank" in l)[-4000:]
        return json.loads((run / "worker.json").read_text())

    whole, broken = tmp_path / "whole", tmp_path / "broken"
    info = launch(whole, 2)
    assert info == {"started_at": 0, "world": 2, "sharded": "DTensor"}  # really sharded over 2 ranks
    launch(broken, 1)
    resumed = launch(broken, 2, "resume")
    assert resumed["started_at"] == 1  # resumed from the step-1 checkpoint, not from scratch

    ckpt = whole / "checkpoints" / "step_2"
    state = json.loads((ckpt / "state.json").read_text())
    assert (state["step"], state["data_pos"], state["world_size"]) == (2, 4, 2)
    assert {"optimizer_rank0.pt", "optimizer_rank1.pt", "rng_rank1.pt"} <= set(state["files"])
    assert json.loads((ckpt / "config.json").read_text())["architectures"] == ["Qwen2_5_VLForConditionalGeneration"]

    gathered = torch.load(whole / "gathered.pt")
    model, processor = load_policy(str(ckpt))  # one process, no launcher, no FSDP
    weights = model.state_dict()
    initial = load_policy(str(tiny_dir))[0].state_dict()
    assert set(weights) == set(gathered["weights"])
    for k, v in gathered["weights"].items():
        torch.testing.assert_close(weights[k], v, rtol=0, atol=0, msg=lambda m: f"{k}: {m}")
    moved = [k for k in weights if not torch.equal(weights[k], initial[k])]
    assert any("visual" in k for k in moved) and any("language_model" in k for k in moved)
    with torch.no_grad():
        logp = torch.log_softmax(model.eval()(**inputs(processor, 0, 0)).logits.float(), -1)
    torch.testing.assert_close(logp, gathered["logp"], rtol=0, atol=1e-5)

    after_resume = torch.load(broken / "gathered.pt")["weights"]
    for k, v in gathered["weights"].items():  # bit-identical on one machine; tolerance for safety
        torch.testing.assert_close(after_resume[k], v, rtol=1e-6, atol=1e-7, msg=lambda m: f"{k}: {m}")


def test_sharding_fallback_is_named():
    from mmrlvr.train.setup import sharding_fallback

    why = sharding_fallback({"ACCELERATE_USE_FSDP": "true"}, "MULTI_CPU")
    assert "FSDP" in why and "MULTI_CPU" in why and "torchrun" in why and "ddp_cpu.yaml" in why
    assert "DEEPSPEED" in sharding_fallback({"ACCELERATE_USE_DEEPSPEED": "True"}, "NO")
    assert sharding_fallback({"ACCELERATE_USE_FSDP": "true"}, "FSDP") is None
    assert sharding_fallback({"ACCELERATE_USE_FSDP": "false"}, "MULTI_CPU") is None
    assert sharding_fallback({}, "MULTI_CPU") is None


@pytest.mark.slow
def test_fsdp_config_on_cpu_is_refused_not_run_as_ddp(tmp_path):
    """accelerate 1.15 turns a `distributed_type: FSDP` + `use_cpu` launch into MULTI_CPU (DDP,
    nothing sharded) without a word; `mmrlvr train` names it and stops before loading anything."""
    cfg = tmp_path / "fsdp2_cpu.yaml"
    cfg.write_text("distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nmixed_precision: 'no'\n"
                   "fsdp_config:\n  fsdp_version: 2\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(cfg),
                           "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", f"output_dir={tmp_path / 'run'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    assert "asks for FSDP (ACCELERATE_USE_FSDP=true) but accelerate set up MULTI_CPU" in proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_generation_is_synced_only_for_sharded_parameters_across_ranks(monkeypatch, tiny_dir):
    """FSDP2/ZeRO-3 decoding is a collective per token: generate must step until every rank is done."""
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout import generation as hf  # synced_generation and _world_size live there

    model, _ = load_policy(str(tiny_dir))
    monkeypatch.setattr(hf, "_world_size", lambda: 2)
    assert not hf.synced_generation(model)  # DDP: each rank decodes on its own
    p = next(model.model.language_model.parameters())
    p.ds_id = 7  # how DeepSpeed ZeRO-3 marks a partitioned parameter
    assert hf.synced_generation(model)
    monkeypatch.setattr(hf, "_world_size", lambda: 1)
    assert not hf.synced_generation(model)  # one process: nothing to wait for


def test_sharded_launch_refuses_token_weighting_before_the_model_loads():
    """FSDP / ZeRO-3 forwards are collectives; per-rank signal forwards would hang, so a method is
    refused and diagnostics are switched off, from the Accelerator alone (no model needed)."""
    from types import SimpleNamespace

    from mmrlvr.config import ConfigError, load_config
    from mmrlvr.methods.token_weighting.method import for_launch as token_weighting_for_launch

    def acc(kind, n, stage=None):
        return SimpleNamespace(distributed_type=f"DistributedType.{kind}", num_processes=n,
                               state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=stage) if stage else None))

    tor = load_config(None, ["token_weighting.method=tor"])
    with pytest.raises(ConfigError, match="token_weighting.method=tor is not supported with sharded"):
        token_weighting_for_launch(tor, acc("FSDP", 2))
    with pytest.raises(ConfigError):
        token_weighting_for_launch(tor, acc("DEEPSPEED", 2, stage=3))
    assert token_weighting_for_launch(tor, acc("DEEPSPEED", 2, stage=2)) is tor  # ZeRO-2: parameters whole
    assert token_weighting_for_launch(tor, acc("MULTI_CPU", 2)) is tor
    assert token_weighting_for_launch(tor, acc("FSDP", 1)) is tor
    plain = token_weighting_for_launch(load_config(None, []), acc("FSDP", 2))
    assert plain.token_weighting.method == "none" and plain.token_weighting.diagnostics is False
