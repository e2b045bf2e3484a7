"""Each prompt's forward once per group gives the same tokens and sampler log-probs as generate's
own prefill of G copies, in every tiny family, for images and video, with left-padded prompts of
different lengths and non-default sampling settings."""

from __future__ import annotations

import pytest
import torch

from mmrlvr.models.families import FAMILIES
from mmrlvr.rollout.hf import HFRolloutEngine
from tests.rollout.test_shared_prefill import both_ways, mixed_prompts

VIDEO_FAMILIES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "llava_onevision")  # processors that take video


@pytest.mark.parametrize("model_type,media", [(f, "image") for f in FAMILIES] + [(f, "video") for f in VIDEO_FAMILIES])
def test_shared_prefill_samples_the_same_tokens_in_every_family(model_type, media, family_policy):
    model, processor = family_policy(model_type)
    engine = HFRolloutEngine(model, processor)
    samples = mixed_prompts(media)
    own, shared = both_ways(engine, samples, 3, temperature=0.7, max_new_tokens=9, top_k=40)
    assert torch.equal(own.completion_ids, shared.completion_ids), model_type
    assert torch.equal(own.completion_mask, shared.completion_mask)
    m = own.completion_mask.bool()
    assert (own.sampler_logprobs[m] - shared.sampler_logprobs[m]).abs().max() < 1e-4
    assert [c.text for c in own.completions] == [c.text for c in shared.completions]
    assert own.prompt_inputs["input_ids"].shape[0] == shared.prompt_inputs["input_ids"].shape[0] == 3


