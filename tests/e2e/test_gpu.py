"""GPU paths (CUDA, bf16, sdpa): skipped cleanly on machines without CUDA."""

import json

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_short_run_on_cuda_in_bf16(tmp_path):
    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    cfg = load_config("configs/quickstart.yaml", [
        f"output_dir={tmp_path / 'gpu'}", "device=cuda", "model.dtype=bfloat16", "model.attn_implementation=sdpa",
        "task.train_size=64", "task.eval_size=16", "warm_start.steps=4", "train.steps=2", "threads=4",
    ])
    summary = train(cfg)
    assert 0.0 <= summary["eval_after"]["accuracy"] <= 1.0
    rows = [json.loads(x) for x in (tmp_path / "gpu" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]


def test_logprobs_match_generate_on_cuda(tiny_dir):
    from PIL import Image

    from mmrlvr.config import ModelConfig, RolloutConfig
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.logprobs import completion_logprobs
    from mmrlvr.types import Sample

    model, processor = load_policy(ModelConfig(path=str(tiny_dir), dtype="bfloat16"))
    model.to("cuda")
    engine = HFRolloutEngine(model, processor)
    msg = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]},)
    samples = [Sample("a", msg, 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),))]
    out = engine.rollout(samples, 4, RolloutConfig(max_new_tokens=8), seed=0)
    inputs = {k: (v.to("cuda") if isinstance(v, torch.Tensor) else v) for k, v in repeat_prompts(out.prompt_inputs, 4).items()}
    lp, _ = completion_logprobs(model, inputs, out.completion_ids, out.completion_mask, suppress_ids=engine.suppress_ids)
    assert lp.is_cuda and torch.isfinite(lp[out.completion_mask.bool().cuda()]).all()
