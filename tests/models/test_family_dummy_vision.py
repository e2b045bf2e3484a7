"""A rank whose micro-batch holds no media must still send a gradient for every parameter the
media go through, in every family, or DDP's all-reduce waits for it (FSDP / ZeRO-3: the
all-gather). The zero-weight pass (`dummy_vision_pass`) must reach exactly those parameters:
whatever a real image's backward reaches outside the language model (vision tower, merger,
projector, connector, LLaVA's image_newline), with zero gradients, so the update is unchanged."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from mmrlvr.data.collate import encode_prompts, model_kwargs
from mmrlvr.models.adapters import model_adapter
from mmrlvr.models.families import FAMILIES
from mmrlvr.train.distributed import (dummy_vision_pass, freeze_unreachable, media_parameters, remember_dummy_media,
                                      vision_tower_trainable)
from mmrlvr.types import Sample


def _sample(image: bool) -> Sample:
    content = ([{"type": "image"}] if image else []) + [{"type": "text", "text": "How many red shapes?"}]
    images = (Image.new("RGB", (96, 80), (200, 30, 30)),) if image else ()
    return Sample("s", ({"role": "user", "content": content},), 1, images=images)


def _grads_after(model, processor, image: bool, dummy: bool) -> dict:
    model.zero_grad(set_to_none=True)
    inputs = model_kwargs(encode_prompts(processor, [_sample(image)]), "cpu")
    loss = model(**inputs).logits.float().pow(2).mean()
    if dummy:
        loss = loss + dummy_vision_pass(model)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_zero_weight_pass_reaches_every_media_parameter(model_type, family_policy):
    model, processor = family_policy(model_type)
    was_training = model.training
    model.train()
    remember_dummy_media(model, processor)
    with_image = _grads_after(model, processor, image=True, dummy=False)
    text_only = _grads_after(model, processor, image=False, dummy=False)
    padded = _grads_after(model, processor, image=False, dummy=True)
    media = set(with_image) - set(text_only)  # what only the image's forward reaches
    assert media, model_type
    # every parameter only an image reaches is a media parameter (LLaVA's vision tower also holds
    # a post-layernorm its features are taken before, which nothing reaches)
    assert media <= {n for n, p in model.named_parameters() if any(p is q for q in media_parameters(model))}, model_type
    assert vision_tower_trainable(model)
    assert media <= set(padded), sorted(media - set(padded))[:5]
    assert all(float(padded[n].abs().max()) == 0.0 for n in media)  # zero weight: the update is unchanged
    for n in text_only:  # and the language model's gradients are the text-only forward's
        assert torch.equal(padded[n], text_only[n]), n
    model.zero_grad(set_to_none=True)
    model.train(was_training)


def test_without_a_remembered_image_a_qwen_model_builds_its_own(family_policy):
    """The Qwen families' flat patches need no processor: one merge window of zeros."""
    model, _ = family_policy("qwen2_vl")
    out = dummy_vision_pass(model)
    assert out.shape == () and out.item() == 0.0 and out.requires_grad


def test_other_families_say_what_is_missing(family_policy):
    import mmrlvr.train.distributed as d

    model, _ = family_policy("idefics3")
    d._DUMMY_MEDIA.pop(model, None)
    with pytest.raises(RuntimeError, match="remember_dummy_media"):
        dummy_vision_pass(model)
    assert model_adapter(model).layout == "per_row"


@pytest.mark.parametrize("model_type", FAMILIES)
def test_parameters_no_forward_reaches_are_frozen_before_ddp(model_type, family_policy):
    """LLaVA-OneVision's vision tower holds a post-layernorm its features are taken before: nothing
    reaches it, and DDP would stop at the next forward. Exactly those are frozen; after that a
    real image prompt's backward reaches every trainable parameter, in every family."""
    model, processor = family_policy(model_type)
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    try:
        embed = model.get_input_embeddings().weight
        embed.requires_grad_(False)  # frozen already (e.g. by the user): not reported again
        model.train()
        dropping = {m: m.attention_dropout for m in model.modules() if isinstance(getattr(m, "attention_dropout", None), float)}
        for m in dropping:  # the tiny configs have none: a training-mode forward would draw random numbers
            m.attention_dropout = 0.1
        rng = torch.get_rng_state()
        frozen = freeze_unreachable(model, processor)
        assert model.training and torch.equal(torch.get_rng_state(), rng)  # mode kept, no random draw
        for m, p in dropping.items():
            m.attention_dropout = p
        embed.requires_grad_(True)
        expected = ["model.vision_tower.post_layernorm.weight",
                    "model.vision_tower.post_layernorm.bias"] if model_type == "llava_onevision" else []
        assert sorted(frozen) == sorted(expected), frozen
        reached = _grads_after(model, processor, image=True, dummy=False)
        assert {n for n, p in model.named_parameters() if p.requires_grad} == set(reached)
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(before[n])
        model.zero_grad(set_to_none=True)


def test_only_media_parameters_are_frozen(family_policy):
    """An unused parameter in the vision tower is frozen; one in the language model is left alone
    (a probe that missed it must not freeze the language model)."""
    model, processor = family_policy("qwen2_5_vl")
    inner = model.model
    inner.visual.register_parameter("unused_probe", torch.nn.Parameter(torch.zeros(3)))
    inner.language_model.register_parameter("unused_probe", torch.nn.Parameter(torch.zeros(3)))
    try:
        assert freeze_unreachable(model, processor) == ["model.visual.unused_probe"]
        assert not inner.visual.unused_probe.requires_grad and inner.language_model.unused_probe.requires_grad
    finally:
        del inner.visual.unused_probe, inner.language_model.unused_probe
