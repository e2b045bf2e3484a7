"""GPU paths (CUDA, bf16, sdpa): they compare numbers, and skip cleanly without CUDA.

Tolerances, stated once: on CUDA in fp32 the teacher-forced log-probs equal the sampler's to
1e-3 nats (KV-cached vs full-sequence kernels sum in a different order); in bf16 the logits carry
~3 significant digits, so the mean |difference| must stay under 0.05 nats and the largest under
0.5. A bf16 update must point the same way as the fp32 one: gradient cosine > 0.99, norms within
5%, policy loss within 0.01.
"""

import copy
import json

import pytest
import torch

pytestmark = pytest.mark.gpu


def _samples():
    from PIL import Image

    from mmrlvr.types import Sample

    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many red shapes?"}]},)
    return [Sample("a", msg, 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
            Sample("b", msg, 2, images=(Image.new("RGB", (112, 84), (30, 30, 200)),))]


@pytest.mark.parametrize("dtype,max_tol,mean_tol", [("float32", 1e-3, 1e-3), ("bfloat16", 0.5, 0.05)])
def test_cuda_logprobs_match_the_sampler_scores(tiny_dir, dtype, max_tol, mean_tol):
    from mmrlvr.config import ModelConfig, RolloutConfig
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.logprobs import completion_logprobs

    model, processor = load_policy(ModelConfig(path=str(tiny_dir), dtype=dtype))
    model.to("cuda")
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(_samples(), 4, RolloutConfig(max_new_tokens=12, temperature=0.8), seed=0, return_logprobs=True)
    with torch.no_grad():
        lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, 4), out.completion_ids, out.completion_mask,
                                    temperature=0.8, suppress_ids=engine.suppress_ids)
    assert lp.is_cuda
    m = out.completion_mask.bool()
    diff = (lp.cpu() - out.sampler_logprobs)[m].abs()
    assert diff.max().item() < max_tol and diff.mean().item() < mean_tol, (diff.max().item(), diff.mean().item())


class _GradRecorder(torch.optim.SGD):
    """Keeps the fp32 gradient of the one optimizer step instead of taking it."""

    def step(self, closure=None):
        self.grads = torch.cat([p.grad.float().flatten() if p.grad is not None else torch.zeros(p.numel(), device=p.device)
                                for g in self.param_groups for p in g["params"]])


def test_bf16_update_matches_fp32(tiny_dir):
    from accelerate import Accelerator

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import ModelConfig, load_config
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.tasks import load_task
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import collect
    from tests.train.step_helpers import run_update, with_algo
    from mmrlvr.verifiers.score import InProcessScorer

    model, processor = load_policy(ModelConfig(path=str(tiny_dir), dtype="float32"))
    model.to("cuda")
    cfg = load_config(None, ["rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
                             "train.max_grad_norm=1e9"])
    algo = resolve_algo(cfg.algo, 8)
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(), with_algo(cfg, algo), seed=0)
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0], [0.2, 0.0, 0.0, 0.0]])
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        m = copy.deepcopy(model).to(dtype).train()
        opt = _GradRecorder(m.parameters(), lr=1.0)
        stats = run_update(m, None, opt, Accelerator(), batch, cfg, algo, engine.suppress_ids, seed=0)
        results[dtype] = (opt.grads, stats["loss/policy"])
    g32, loss32 = results[torch.float32]
    g16, loss16 = results[torch.bfloat16]
    cos = torch.nn.functional.cosine_similarity(g32, g16, dim=0).item()
    assert g32.norm() > 0 and cos > 0.99, cos
    assert abs(g16.norm().item() / g32.norm().item() - 1) < 0.05
    assert loss16 == pytest.approx(loss32, abs=0.01)


def test_short_run_on_cuda_in_bf16(tmp_path):
    from safetensors.torch import load_file

    from mmrlvr.config import load_config
    from mmrlvr.recipe.loop import train

    cfg = load_config("configs/quickstart.yaml", [
        f"output_dir={tmp_path / 'gpu'}", "device=cuda", "model.dtype=bfloat16", "model.attn_implementation=sdpa",
        "task.train_size=64", "task.eval_size=16", "warm_start.steps=4", "train.steps=2", "threads=4",
    ])
    train(cfg)
    rows = [json.loads(x) for x in (tmp_path / "gpu" / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in step] == [1, 2]
    assert all(torch.isfinite(torch.tensor([r["loss/policy"], r["actor/entropy"]])).all() for r in step)
    before = load_file(tmp_path / "gpu" / "warm_start" / "model.safetensors")
    after = load_file(tmp_path / "gpu" / "checkpoints" / "step_2" / "model.safetensors")
    assert after["lm_head.weight"].dtype == torch.float32  # the float32 master weights
    assert any(not torch.equal(before[k], after[k]) for k in before)
    served = load_file(tmp_path / "gpu" / "model" / "model.safetensors")  # the final policy in model.dtype
    assert served["lm_head.weight"].dtype == torch.bfloat16
