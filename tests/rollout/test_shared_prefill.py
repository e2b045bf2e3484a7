"""Each prompt's forward once per group (`mmrlvr.rollout.prefill`): the prompt's tokens go through
the model once per prompt instead of G times, the per-row position state follows the batch, and
the cases it does not cover keep generate's own prefill. Every family: tests/models/test_family_prefill.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from PIL import Image

from mmrlvr.config import RolloutConfig
from mmrlvr.models.family_spec import FAMILY_SPECS
from mmrlvr.rollout import hf
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.rollout.prefill import why_not_shared
from mmrlvr.tasks import load_task
from mmrlvr.types import Sample

def mixed_prompts(media: str):
    """Three prompts of different lengths (left padding in the batch) and different media."""
    if media == "video":
        base = load_task("video_motion", "train", 3, seed=3, frames=4)
    else:
        base = load_task("counting", "train", 3, seed=3)
    extra = ["", " Think it over first, then answer with one number only, please.", " Be brief."]
    out = []
    for s, more in zip(base, extra):
        msgs = [dict(m) for m in s.messages]
        content = [dict(p) for p in msgs[-1]["content"]]
        content[-1]["text"] += more
        msgs[-1]["content"] = content
        out.append(dataclasses.replace(s, messages=tuple(msgs)))
    return out


def both_ways(engine, samples, group: int, **sampling):
    """The same rollout with generate's own prefill and with the shared one."""
    own = engine.rollout(samples, group, RolloutConfig(shared_prefill=False, **sampling), seed=11)
    shared = engine.rollout(samples, group, RolloutConfig(shared_prefill=True, **sampling), seed=11)
    return own, shared


def _embedded_rows(model):
    """Every (rows, tokens) the language model's embedding sees while the hook is on."""
    seen: list[tuple[int, int]] = []
    handle = model.get_input_embeddings().register_forward_hook(lambda _m, args, _o: seen.append(tuple(args[0].shape)))
    return seen, handle


def test_the_prompt_goes_through_the_model_once_per_prompt(tiny):
    """Hand count: B=3 prompts of L tokens, G=4. Shared: one (3, L-1) forward, then (12, 1) steps.
    generate's own prefill: one (12, L) forward."""
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    samples = mixed_prompts("image")
    seen, handle = _embedded_rows(model)
    try:
        out = engine.rollout(samples, 4, RolloutConfig(max_new_tokens=5, temperature=1.3), seed=2)
        length = out.prompt_inputs["input_ids"].shape[1]
        shared_calls = list(seen)
        seen.clear()
        engine.rollout(samples, 4, RolloutConfig(max_new_tokens=5, temperature=1.3, shared_prefill=False), seed=2)
    finally:
        handle.remove()
    steps = out.completion_ids.shape[1]
    assert shared_calls == [(3, length - 1)] + [(12, 1)] * steps
    assert seen == [(12, length)] + [(12, 1)] * (steps - 1)


def test_position_state_is_repeated_and_not_reused_from_an_earlier_batch(tiny):
    """Qwen keeps mRoPE offsets (rope_deltas) per row: repeated G times after the prefill, and
    recomputed for a batch of another size (a stale (B*G, 1) tensor would misplace every token)."""
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    samples = mixed_prompts("image")
    engine.rollout(samples, 4, RolloutConfig(max_new_tokens=3), seed=0)
    assert model.model.rope_deltas.shape == (12, 1)
    own, shared = both_ways(engine, samples[1:], 5, temperature=0.9, max_new_tokens=8, top_p=0.95)
    assert torch.equal(own.completion_ids, shared.completion_ids)
    assert model.model.rope_deltas.shape == (10, 1)


def test_when_generate_keeps_its_own_prefill(tiny):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    ok = {"input_ids": torch.tensor([[5, 6, 7], [0, 6, 7]]), "attention_mask": torch.tensor([[1, 1, 1], [0, 1, 1]])}
    media = engine.suppress_ids[0]
    assert why_not_shared(model, ok, True, engine.suppress_ids) is None
    assert "no prompt repeated" in why_not_shared(model, ok, False, engine.suppress_ids)
    right = {**ok, "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}
    assert "right" in why_not_shared(model, right, True, engine.suppress_ids)
    ends_in_media = {**ok, "input_ids": torch.tensor([[5, 6, 7], [0, 6, media]])}
    assert "media" in why_not_shared(model, ends_in_media, True, engine.suppress_ids)
    one = {"input_ids": torch.tensor([[5], [6]]), "attention_mask": torch.tensor([[1], [1]])}
    assert "one token" in why_not_shared(model, one, True, engine.suppress_ids)


def test_a_family_not_checked_for_it_uses_generates_prefill(tiny, monkeypatch):
    model, processor = tiny
    spec = FAMILY_SPECS["qwen2_5_vl"]
    monkeypatch.setitem(FAMILY_SPECS, "qwen2_5_vl",
                        dataclasses.replace(spec, adapter=dataclasses.replace(spec.adapter, shared_prefill=False)))
    calls = []
    monkeypatch.setattr(hf, "prefill_once", lambda *a, **k: calls.append(a))
    engine = HFRolloutEngine(model, processor)
    img = Image.new("RGB", (112, 112), (200, 30, 30))
    sample = Sample("a", ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]},), 1,
                    images=(img,))
    out = engine.rollout([sample], 3, RolloutConfig(max_new_tokens=4), seed=0)
    assert calls == [] and out.completion_ids.shape[0] == 3
    assert "not checked" in why_not_shared(model, {"input_ids": torch.tensor([[1, 2]])}, True, engine.suppress_ids)
