"""Segmented generation in every tiny family: keeping every row is the plain rollout bit for bit, and
dropped rows leave the survivors' tokens as they were (each family's own position bookkeeping, left
padded prompts of different lengths, images and video, shared and generate's own prefill)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.models.families import FAMILIES
from mmrlvr.rollout.hf import HFRolloutEngine
from tests.models.test_family_prefill import VIDEO_FAMILIES
from tests.rollout.test_shared_prefill import mixed_prompts


@pytest.mark.parametrize("shared_prefill", [True, False])
@pytest.mark.parametrize("model_type,media", [(f, "image") for f in FAMILIES] + [(f, "video") for f in VIDEO_FAMILIES])
def test_segmented_generation_in_every_family(model_type, media, shared_prefill, family_policy):
    model, processor = family_policy(model_type)
    engine = HFRolloutEngine(model, processor)
    samples = mixed_prompts(media)
    rc = RolloutConfig(max_new_tokens=9, temperature=0.7, top_k=40, shared_prefill=shared_prefill)
    whole = engine.rollout(samples, 3, rc, seed=1)
    seg = engine.rollout_segmented(samples, 3, rc, seed=1, prefix_tokens=3, keep=lambda v: [True] * len(v.tokens))
    assert torch.equal(seg.output.completion_ids, whole.completion_ids), model_type
    assert torch.equal(seg.output.sampler_logprobs, whole.sampler_logprobs)
    assert [c.text for c in seg.output.completions] == [c.text for c in whole.completions]
    keep = [i % 3 != 1 for i in range(9)]
    pruned = engine.rollout_segmented(samples, 3, rc, seed=1, prefix_tokens=3, keep=lambda v: keep)
    kept = [i for i in range(9) if keep[i]]
    assert pruned.rows.tolist() == kept and pruned.counts.pruned_alive > 0
    t = pruned.output.completion_ids.shape[1]
    assert torch.equal(pruned.output.completion_ids, whole.completion_ids[kept][:, :t]), model_type
    assert [c.text for c in pruned.output.completions] == [whole.completions[i].text for i in kept]
    torch.testing.assert_close(pruned.output.sampler_logprobs, whole.sampler_logprobs[kept][:, :t], rtol=0, atol=1e-5)
