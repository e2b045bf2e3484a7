"""`mmrlvr plan`: shipped model configs at their published sizes, hand-computed memory terms, the JSON
contract, one-line errors, and every shipped GPU config fitting the hardware its header states."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.plan.activations import kv_cache_bytes
from mmrlvr.plan.hardware import Hardware, header_hardware
from mmrlvr.plan.memory import resident, trainable_params
from mmrlvr.plan.shape import SHIPPED, model_shape

ROOT = Path(__file__).resolve().parents[2]
GPU_CONFIGS = sorted(p for p in (ROOT / "configs").glob("*.yaml")
                     if not load_config(p).model.path.startswith("tiny"))

# published parameter counts (the model cards' "Model size"), in billions
PUBLISHED = {"Qwen2.5-VL-3B-Instruct": 3.75, "Qwen2.5-VL-7B-Instruct": 8.29, "Qwen2-VL-2B-Instruct": 2.21,
             "Qwen2-VL-7B-Instruct": 8.29, "Qwen3-VL-2B-Instruct": 2.13, "Qwen3-VL-4B-Instruct": 4.44,
             "Qwen3-VL-8B-Instruct": 8.77}


@pytest.fixture(scope="module")
def qwen3b():
    return model_shape("Qwen/Qwen2.5-VL-3B-Instruct")


def test_every_shipped_config_builds_at_its_published_size():
    assert sorted(p.stem for p in SHIPPED.glob("*.json")) == sorted(PUBLISHED)
    for name, billions in PUBLISHED.items():
        s = model_shape(f"Qwen/{name}")
        assert round(s.params / 1e9, 2) == billions, name


def test_qwen2_5_vl_3b_sizes_and_hand_computed_terms(qwen3b):
    s = qwen3b
    assert (s.params, s.vision_params, s.layers, s.hidden, s.kv_heads, s.head_dim) == (
        3_754_622_976, 668_684_288, 36, 2048, 2, 128)
    # 128 rows x 2,560 positions x 36 layers x (K + V) x 2 KV heads x 128 x 2 bytes
    assert kv_cache_bytes(s, 128, 2560, "bfloat16") == 128 * 2560 * 36 * 2 * 2 * 128 * 2 == 12_079_595_520
    cfg = load_config(None, ["model.dtype=bfloat16", "model.freeze_vision=true", "model.path=Qwen/Qwen2.5-VL-3B-Instruct"])
    trained = 3_754_622_976 - 668_684_288
    assert trainable_params(cfg, s) == trained
    one = resident(cfg, s, Hardware(1, 80, "one"), kl=True)
    assert one == {"weights": 3_754_622_976 * 2, "masters": trained * 4, "optimizer": trained * 8,
                   "reference_weights": 3_754_622_976 * 2}
    z2 = resident(cfg, s, Hardware(4, 80, "zero2"), kl=False)  # masters and moments sharded, weights not
    assert z2 == {"weights": 3_754_622_976 * 2, "masters": trained * 4 / 4, "optimizer": trained * 8 / 4}
    lora = load_config(None, ["model.dtype=float32", "model.lora_rank=16"])
    assert trainable_params(lora, s) == 16 * s.lora_in_out
    # float32: no separate masters; LoRA: no reference copy (the adapter is switched off)
    assert resident(lora, s, Hardware(1, 80, "one"), kl=True) == {"weights": s.params * 4, "masters": 0.0,
                                                                  "optimizer": 16 * s.lora_in_out * 8}


def test_header_hardware_lines(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("# A run\n# Hardware: 4 x 80 GB GPUs, fsdp2 (configs/accelerate/fsdp2.yaml)\nseed: 0\n")
    assert header_hardware(p) == Hardware(4, 80.0, "fsdp2")
    p.write_text("# Hardware: one 40 GB GPU (A100), bf16\nseed: 0\n")
    assert header_hardware(p) == Hardware(1, 40.0, "one")
    p.write_text("seed: 0\n# Hardware: one 80 GB GPU\n")  # only the leading comments count
    assert header_hardware(p) is None


@pytest.mark.parametrize("path", GPU_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_gpu_config_fits_its_stated_hardware(path, capsys):
    hw = header_hardware(path)
    assert hw is not None, f"{path.name}: no '# Hardware:' header line"
    assert main(["plan", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["gpu_memory_gb"] == hw.gpu_gb and out["gpus"] == hw.gpus, out
    assert out["per_gpu_gb"] == max(p["gb"] for p in out["phases"].values())
    stated = re.search(r"([\d.]+) GB peak per GPU", path.read_text())
    assert stated and abs(float(stated.group(1)) - out["per_gpu_gb"]) <= 0.1, "header figure is stale"


def test_json_contract_and_overrides(capsys):
    path = str(ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml")
    assert main(["plan", path, "--json", "--gpu-memory", "40"]) == 3  # 3: does not fit (the JSON says so too)
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out["per_gpu_gb"], float) and isinstance(out["fits"], bool)
    assert set(out["phases"]) == {"rollout", "update", "reference", "evaluation"}
    assert all(isinstance(p["gb"], float) for p in out["phases"].values())
    assert out["fits"] is False and out["gpu_memory_gb"] == 40 and out["suggestions"]
    update = out["phases"]["update"]  # what checkpointing buys at the same budget: every layer's set kept
    assert update["activations_without_checkpointing_gb"] > 5 * update["parts_gb"]["activations"]
    # without the budget the update is planned at 512 rows: far over, and the plan says which setting fixes it
    assert main(["plan", path, "train.micro_batch_tokens=null", "rollout.generate_max_rows=null", "--json"]) == 3
    big = json.loads(capsys.readouterr().out)
    assert big["phases"]["update"]["gb"] > 200 and not big["fits"]
    assert any(s.startswith("train.micro_batch_tokens=") for s in big["suggestions"])
    assert any(s.startswith("rollout.generate_max_rows=") for s in big["suggestions"])
    # two GPUs under ZeRO-3 hold less per GPU than one
    assert main(["plan", path, "--json", "--gpus", "2", "--launcher", "zero3"]) == 0
    assert json.loads(capsys.readouterr().out)["per_gpu_gb"] < out["per_gpu_gb"]


def test_bad_input_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  path: Org/Unknown-VL\n")
    assert main(["plan", str(cfg), "--gpus", "1", "--gpu-memory", "80"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Org/Unknown-VL" in err[0] and "Qwen/Qwen2.5-VL-3B-Instruct" in err[0]
    cfg.write_text("seed: 0\n")
    assert main(["plan", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpus N --gpu-memory GB" in err[0]


def test_sharded_launchers_plan_whole_logits(qwen3b):
    """FSDP2 / ZeRO-3 shard the output layer, so the learner computes the micro-batch's whole logits:
    rows x T x V x (2 bytes bf16 + four float32 copies) at least, where one GPU plans 4 M-logit blocks."""
    from mmrlvr.plan.memory import plan

    # the budget this was worked out at (the config's own is 8,192 since the bf16 gradients are planned)
    cfg = load_config(ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml", ["train.micro_batch_tokens=16384"])
    one = plan(cfg, qwen3b, Hardware(1, 80, "one"))
    fsdp = plan(cfg, qwen3b, Hardware(4, 80, "fsdp2"))
    rows = fsdp["micro_batch_rows"]
    whole = rows * 1024 * 151_936 * (2 + 16) / 1e9
    assert fsdp["phases"]["update"]["parts_gb"]["activations"] >= whole > 10
    assert one["phases"]["update"]["parts_gb"]["activations"] < whole
    # sharded weights, masters and moments: a quarter each, plus two gathered decoder layers
    parts = fsdp["phases"]["update"]["parts_gb"]
    assert parts["weights"] == round(3_754_622_976 * 2 / 4 / 1e9, 2)
    assert parts["gathered_layers"] == round(2 * qwen3b.largest_layer * 2 / 1e9, 2)


def test_processor_bound_and_vllm_share(capsys):
    """max_pixels null: the model directory's own processor bound (the tiny one: 50,176 px = 64 tokens);
    a vLLM config plans without vLLM installed, its share in the generating phases, and a smaller share
    is suggested when it does not fit."""
    assert main(["plan", str(ROOT / "configs" / "quickstart.yaml"), "--gpus", "1", "--gpu-memory", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["visual_tokens"] == 50176 // (28 * 28) == 64 and out["prompt_tokens"] == 64 + 256
    path = str(ROOT / "configs" / "chart_qwen2_5_vl_3b.yaml")
    assert main(["plan", path, "rollout.engine=vllm", "rollout.vllm_gpu_memory_utilization=0.5", "--json"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["phases"]["rollout"]["parts_gb"]["vllm"] == 40.0 and "vllm" not in out["phases"]["update"]["parts_gb"]
    assert not out["fits"] and any(s.startswith("rollout.vllm_gpu_memory_utilization=0.") for s in out["suggestions"])


def test_bf16_micro_batches_plan_the_backwards_gradients_beside_the_masters_sum(qwen3b):
    """One process in bf16: from the second micro-batch on, the float32 gradient sum on the masters
    (4 bytes a trained parameter) and the backward's bf16 gradients (2 bytes) are held together;
    one micro-batch per step, or float32 weights, hold no second set."""
    from mmrlvr.plan.memory import plan, trainable_params

    cfg = load_config(ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml")
    parts = plan(cfg, qwen3b, Hardware(1, 80, "one"))["phases"]["update"]["parts_gb"]
    n = trainable_params(cfg, qwen3b)
    assert parts["gradients"] == round(n * 4 / 1e9, 2) and parts["micro_batch_gradients"] == round(n * 2 / 1e9, 2)
    whole = load_config(ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml",
                        ["train.micro_batch_tokens=null", "rollout.prompts_per_step=1", "rollout.group_size=2"])
    assert "micro_batch_gradients" not in plan(whole, qwen3b, Hardware(1, 80, "one"))["phases"]["update"]["parts_gb"]
    fp32 = load_config(ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml", ["model.dtype=float32"])
    assert "micro_batch_gradients" not in plan(fp32, qwen3b, Hardware(1, 80, "one"))["phases"]["update"]["parts_gb"]


def test_exit_status_says_whether_it_fits(tmp_path):
    """0 when the plan fits, 3 when it does not (text or JSON alike), 2 when the config is refused:
    a script tells the three apart without parsing the output."""
    import os
    import subprocess
    import sys

    path = str(ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def status(*argv: str) -> int:
        return subprocess.run([sys.executable, "-m", "mmrlvr.cli", "plan", path, *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300).returncode

    assert status() == 0  # its header's one 80 GB GPU
    assert status("--gpu-memory", "40") == 3
    assert status("--gpu-memory", "40", "--json") == 3
    assert status("train.lr=-1") == 2
