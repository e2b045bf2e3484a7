"""benchmarks/speed/decode_floor.py times the model's own work: its bare-ops decoding step gives the
logits `generate` computes, step after step, from the same prompt cache (left-padded prompts of
different lengths, G rows each), with the KV cache grown by concatenation or written in place."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.speed.decode_floor import OpsDecoder, model_logits, prompt_cache  # noqa: E402
from tests.rollout.test_shared_prefill import mixed_prompts  # noqa: E402


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen2_vl"])
@pytest.mark.parametrize("inplace", [False, True])
def test_the_ops_decoder_computes_the_models_logits(model_type, inplace, family_policy):
    from mmrlvr.rollout.hf import HFRolloutEngine

    model, processor = family_policy(model_type)
    model.eval()
    engine = HFRolloutEngine(model, processor)
    cache, mask, ids, positions = prompt_cache(model, engine, mixed_prompts("image"), 2)
    assert not bool(mask.all()), "the prompts must be left padded for the test to see the mask"
    steps = 6
    expected, tokens = model_logits(model, cache, mask, ids, steps)
    decoder = OpsDecoder(model, cache, mask, positions, steps, inplace)
    fed = ids[:, -1:]
    for t in range(steps):
        got = decoder.step(fed)
        assert torch.allclose(got, expected[t], rtol=0, atol=1e-5), (t, (got - expected[t]).abs().max())
        fed = tokens[:, t:t + 1]
