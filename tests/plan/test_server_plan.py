"""The rollout server's GPUs in `mmrlvr plan` (`rollout.engine=vllm_server`): each server GPU holds
1/N of the weights and the KV cache its vLLM share leaves, cut N ways; the trainer's rollout and
evaluation phases hold nothing of the generation. Figures hand-computed from Qwen2.5-VL-7B's config
(8,292,166,656 parameters, 28 layers, 4 key/value heads of 128)."""

from __future__ import annotations

from mmrlvr.cli import main
from mmrlvr.plan.server import kv_bytes_per_token, server_plan
from mmrlvr.plan.shape import model_shape

GIB = 2**30


def test_a_7b_server_on_two_by_two_80gb_gpus():
    s = model_shape("Qwen/Qwen2.5-VL-7B-Instruct")
    p = server_plan(s, "bfloat16", 80, tensor_parallel=2, data_parallel=2, sequence_tokens=2048, rows=512)
    weights = 8_292_166_656 * 2 / 2                      # bf16, halved by tensor parallel 2
    kv = 0.9 * 80 * GIB - weights                        # 69,017,244,672 bytes
    per_token = 28 * 2 * (4 // 2) * 128 * 2              # layers x (k, v) x kv heads per GPU x head dim x bf16 = 28,672
    assert p["kv_bytes_per_token"] == per_token == 28_672
    assert p["weights_gb"] == round(weights / GIB, 2) == 7.72 and p["kv_cache_gb"] == round(kv / GIB, 2) == 64.28
    assert int(kv // (per_token * 2048)) == 1175          # sequences of 2048 tokens in one replica's cache
    assert p["sequences_at_once"] == 2 * 1175 and p["fits"] and p["gpus"] == 4


def test_more_shards_than_key_value_heads_keep_one_head_per_gpu_and_too_big_does_not_fit():
    s = model_shape("Qwen/Qwen2.5-VL-7B-Instruct")
    assert kv_bytes_per_token(s, "bfloat16", 8) == 28 * 2 * 1 * 128 * 2  # 4 kv heads over 8 GPUs: replicated
    p = server_plan(s, "float32", 16, tensor_parallel=1, data_parallel=1, sequence_tokens=2048, rows=8)
    assert not p["fits"] and p["sequences_at_once"] == 0  # 33 GB of float32 weights on a 16 GB GPU


def test_the_plan_command_prints_the_server_and_leaves_the_trainer_no_generation(capsys):
    assert main(["plan", "configs/quickstart.yaml", "rollout.engine=vllm_server", "--gpus", "1", "--gpu-memory", "80",
                 "--server-tensor-parallel-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "rollout         0.0 GB  fits   ()" in out and "evaluation      0.0 GB  fits   ()" in out
    # the tiny model in float32: 4 layers x 2 x 1 kv head per GPU x 32 x 4 bytes
    assert "rollout server: 1 x 2 GPUs (data x tensor parallel) of 80 GB" in out and "(1024 bytes a token)" in out
    assert main(["plan", "configs/quickstart.yaml", "rollout.engine=vllm_server", "--server-tensor-parallel-size", "0"]) == 2
