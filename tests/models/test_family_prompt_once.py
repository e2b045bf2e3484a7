"""The learner's forward with each prompt once per group (`prompt_once_logits`) against one forward
of the joined rows, in every tiny family: log-probs, entropies and the parameter gradient of a
loss with per-row weights, on a micro-batch that takes part of some groups (rows of 3 prompts of
different lengths, left padded, completions of mixed lengths)."""

from __future__ import annotations

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts, select_rows
from mmrlvr.models.families import FAMILIES
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train import logprobs as lpmod
from mmrlvr.train.logprobs import completion_logprobs
from tests.rollout.test_shared_prefill import mixed_prompts

VIDEO_FAMILIES = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "llava_onevision")
G = 3
ROWS = [8, 1, 4, 2, 5, 3]  # prompt 2: 1 row, prompt 0: 2, prompt 1: all 3; out of order (shuffled mini-batches)


def _grads(model, fn, weights, mask):
    model.zero_grad(set_to_none=True)
    lp, ent = fn()
    (lp * weights[:, None] * mask).sum().backward()  # padding positions' values are no one's: masked
    return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_type,media", [(f, "image") for f in FAMILIES] + [(f, "video") for f in VIDEO_FAMILIES])
def test_each_prompt_once_equals_the_joined_forward(model_type, media, family_policy):
    model, processor = family_policy(model_type)
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(mixed_prompts(media), G, RolloutConfig(temperature=1.4, max_new_tokens=10), seed=3)
    inputs = select_rows(repeat_prompts(out.prompt_inputs, G), ROWS)
    ids, mask = out.completion_ids[ROWS], out.completion_mask[ROWS].clone()
    mask[0, 4:] = 0  # one shorter completion in the micro-batch
    ids = ids.masked_fill(mask == 0, engine.pad_id)
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])

    def run(once: bool):
        return completion_logprobs(model, inputs, ids, mask, temperature=0.8, suppress_ids=engine.suppress_ids,
                                   with_entropy=True, prompt_once=once)

    assert lpmod.prompt_once_logits(model, inputs, ids, mask) is not None  # the path is taken
    model.train()
    try:
        lp_ref, ent_ref, g_ref = _grads(model, lambda: run(False), weights, mask)
        lp, ent, g = _grads(model, lambda: run(True), weights, mask)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    m = mask.bool()
    assert (lp[m] - lp_ref[m]).abs().max() < 1e-4, model_type
    assert (ent[m] - ent_ref[m]).abs().max() < 1e-4, model_type
    assert g.keys() == g_ref.keys()
    for name in g_ref:  # the vision tower's gradient arrives through the gathered cache
        # (+1e-6: a key bias's gradient is zero up to rounding - softmax ignores a shift of every key)
        diff, size = float((g[name] - g_ref[name]).norm()), float(g_ref[name].norm())
        assert diff <= 1e-4 * size + 1e-6, (model_type, name, diff, size)
    assert any("vis" in n or "vision" in n for n in g_ref)


def test_where_the_joined_forward_is_kept(tiny):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(mixed_prompts("image"), G, RolloutConfig(max_new_tokens=4), seed=0)
    rows = repeat_prompts(out.prompt_inputs, G)
    ids, mask = out.completion_ids, out.completion_mask
    assert lpmod.prompt_once_logits(model, rows, ids, mask) is not None
    one_each = select_rows(rows, [0, 3, 6])  # no prompt repeated: nothing to share
    assert lpmod.prompt_once_logits(model, one_each, ids[[0, 3, 6]], mask[[0, 3, 6]]) is None
    assert lpmod.prompt_once_logits(model, out.prompt_inputs, ids[:3], mask[:3]) is None  # no prompt index
    # a prompt ending in a media token: its features would be lost with the cut last token
    last = int(rows["input_ids"][0, -1])
    assert lpmod.prompt_once_logits(model, rows, ids, mask, media_ids=[last]) is None
    calls = []  # the learner passes its suppressed (media) ids on: one joined forward, not two
    handle = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        completion_logprobs(model, rows, ids, mask, suppress_ids=[last], prompt_once=True)
        assert len(calls) == 1
        completion_logprobs(model, rows, ids, mask, suppress_ids=engine.suppress_ids, prompt_once=True)
        assert len(calls) == 3
    finally:
        handle.remove()
    model.gradient_checkpointing_enable()
    model.train()
    try:  # checkpointed layers drop the cache (they checkpoint only in training mode)
        assert lpmod.prompt_once_logits(model, rows, ids, mask) is None
        model.eval()  # a rollout under checkpointing still shares its prefill
        assert lpmod.why_not_shared(model, out.prompt_inputs, True, engine.suppress_ids) is None
        out_ckpt = engine.rollout(mixed_prompts("image"), G, RolloutConfig(max_new_tokens=4), seed=0)
        assert torch.equal(out_ckpt.completion_ids, out.completion_ids)
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
