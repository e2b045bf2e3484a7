"""One additive attention mask per learner forward (`mmrlvr.models.patches.attention_mask`), in every tiny
family: bit-identical log-probs, entropies and parameter gradients through the learner's forward
(joined and prompt-once, image and video, mixed completion lengths, temperature 0.8, an entropy
term), exactly (layers - 1) fewer mask copies kept per boolean mask, and the hooks gone
afterwards. Plus the conversion against SDPA's own, and where it steps aside."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from mmrlvr.models.families import FAMILIES
from mmrlvr.models.wrapping import base_model
from mmrlvr.models.patches import attention_mask as am
from mmrlvr.train.logprobs import completion_logprobs
from tests.models.test_family_gated_mlp import _batch
from tests.models.test_family_prompt_once import VIDEO_FAMILIES
from tests.models.test_swaps import assert_swaps_nothing_without_grad_autocast_or_the_setting


def _text_attentions(model):
    return [m for m in base_model(model).modules() if type(m).__name__ in am.TEXT_ATTENTIONS]


def _run(model, fn, weights, mask):
    """Log-probs, entropies, gradients; the boolean masks the language model's attention layers
    received (with how many layers got each) and the bytes of 4-D float mask storages autograd kept."""
    received: dict[int, list] = {}
    kept: dict[int, tuple] = {}

    def seen(module, args, kwargs):  # registered before the context's hooks: sees what transformers passes
        m = kwargs.get("attention_mask")
        if isinstance(m, torch.Tensor) and m.dtype == torch.bool:
            received.setdefault(id(m), [m, 0])[1] += 1

    def pack(t):
        if t.dim() == 4 and t.shape[1] == 1 and t.dtype.is_floating_point and t.shape[-2] > 1:
            # held here, so that no mask storage is freed and its address reused by another one
            kept[t.untyped_storage().data_ptr()] = (t, t.untyped_storage().nbytes())
        return t

    hooks = [a.register_forward_pre_hook(seen, with_kwargs=True) for a in _text_attentions(model)]
    model.zero_grad(set_to_none=True)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, ent = fn()
    finally:
        for h in hooks:
            h.remove()
    ((lp * weights[:, None] + 2.5 * ent) * mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), ent.detach(), grads, list(received.values()), sum(size for _, size in kept.values())


def _off_and_on(model, fn, weights, mask):
    """`_run` with `mask_once` off, then on (fn(on) builds the forward), in train mode."""
    model.train()
    try:
        return _run(model, fn(False), weights, mask), _run(model, fn(True), weights, mask)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)


def _assert_shared(off, on, layers: int, forwards: int) -> None:
    """Same numbers, each boolean mask handed to every layer, and exactly SDPA's per-layer copies
    kept fewer, less the one shared copy (its rows padded to ALIGN elements)."""
    lp0, ent0, g0, masks0, kept0 = off
    lp1, ent1, g1, masks1, kept1 = on
    assert torch.equal(lp0, lp1) and torch.equal(ent0, ent1)
    assert g0 and g0.keys() == g1.keys()
    assert all(torch.equal(g0[k], g1[k]) for k in g0), [k for k in g0 if not torch.equal(g0[k], g1[k])]
    assert [n for _, n in masks0] == [layers] * forwards == [n for _, n in masks1]
    sdpa_copy = sum(m.numel() * lp0.element_size() for m, _ in masks0)
    shared = sum(m[..., 0].numel() * -(-m.shape[-1] // am.ALIGN) * am.ALIGN * lp0.element_size() for m, _ in masks0)
    assert kept0 - kept1 == layers * sdpa_copy - shared


@pytest.mark.parametrize("model_type,media", [(f, "image") for f in FAMILIES] + [(f, "video") for f in VIDEO_FAMILIES])
@pytest.mark.parametrize("once", [False, True], ids=["joined", "prompt_once"])
def test_one_mask_per_forward_gives_the_same_numbers(model_type, media, once, family_policy):
    model, processor = family_policy(model_type)
    engine, inputs, ids, mask = _batch(model, processor, media)
    layers = model.config.get_text_config().num_hidden_layers
    assert len(am.eligible_attentions(model)) == layers  # the language model's, no vision attention
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])

    def fn(on):
        return lambda: completion_logprobs(model, inputs, ids, mask, temperature=0.8, suppress_ids=engine.suppress_ids,
                                           with_entropy=True, prompt_once=once, mask_once=on)

    # the mixed prompt lengths pad: every forward hands each layer one boolean mask; prompt-once runs two forwards
    _assert_shared(*_off_and_on(model, fn, weights, mask), layers, 2 if once else 1)
    assert all(not a._forward_pre_hooks for a in _text_attentions(model))  # hooks gone


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_conversion_is_sdpas_own(dtype):
    """An expanded boolean mask (as transformers builds it) against its additive copy, through SDPA
    with gradients: output and all three gradients equal bit for bit, a fully masked row included."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, 8, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(3, 4, 9, 8, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(3, 4, 9, 8, generator=g, dtype=dtype, requires_grad=True)
    keep = torch.rand(3, 1, 1, 9, generator=g) > 0.3
    keep[..., 0] = True
    keep[2] = False  # every key of row 2 masked out: SDPA gives 0 there (a large finite fill would not)
    causal = torch.ones(5, 9, dtype=torch.bool).tril(diagonal=4)
    mask = (keep & causal).expand(3, 1, 5, 9)
    grad = torch.randn(3, 4, 5, 8, generator=g, dtype=dtype)
    outs = []
    for m in (mask, am.additive_mask(mask, dtype)):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        outs.append((out, *torch.autograd.grad(out, (q, k, v), grad)))
    made = am.additive_mask(mask, dtype)
    assert made.dtype == dtype and made.shape == mask.shape and made.stride()[:3] == (5 * 16, 5 * 16, 16)
    assert all(torch.equal(a, b) for a, b in zip(*outs))
    flipped = am.additive_mask(~mask, dtype)  # a mask read the other way round gives other numbers
    assert not torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=flipped.nan_to_num(neginf=-1e4)), outs[0][0])


def test_rows_start_at_multiples_of_16_elements():
    """kv = 9 rounds to 16 at an alignment of 8 too: 17 and 5 tell 16 from 8, and 32 is a multiple."""
    for kv, row in ((5, 16), (17, 32), (32, 32), (33, 48)):
        made = am.additive_mask(torch.ones(2, 1, 3, kv, dtype=torch.bool), torch.float32)
        assert made.shape == (2, 1, 3, kv) and made.stride() == (3 * row, 3 * row, row, 1), kv


def _hooked_call(model, attention, *, positional: bool, mask, dtype=None):
    """Run the pre-hooks `masks_once` put on `attention` as its forward would, and return the
    attention_mask the forward would receive. The hidden states are given by keyword, as every
    family passes them, or positionally."""
    hidden = torch.zeros(1, 2, 8, dtype=dtype or torch.float32)
    args, kwargs = ((hidden,), {"attention_mask": mask}) if positional else ((), {"hidden_states": hidden, "attention_mask": mask})
    for hook in attention._forward_pre_hooks.values():
        out = hook(attention, args, kwargs)
        if out is not None:
            args, kwargs = out
    return kwargs["attention_mask"]


def test_what_the_hook_converts_and_what_it_passes_on(family_policy):
    model, _ = family_policy("qwen2_5_vl")
    first, second = _text_attentions(model)[:2]
    boolean = torch.tensor([True, True, False]).expand(1, 1, 2, 3)
    already = am.additive_mask(boolean, torch.float32)
    with torch.enable_grad(), am.masks_once(model) as n:
        assert n
        for positional in (False, True):  # hidden states by keyword or positionally: converted either way
            got = _hooked_call(model, first, positional=positional, mask=boolean)
            assert got.dtype == torch.float32 and torch.equal(got, already)
        # one boolean mask, one conversion shared by every layer ...
        assert _hooked_call(model, second, positional=False, mask=boolean) is _hooked_call(model, first, positional=False, mask=boolean)
        # ... but one per dtype of the hidden states that meet it
        in_bf16 = _hooked_call(model, second, positional=False, mask=boolean, dtype=torch.bfloat16)
        assert in_bf16.dtype == torch.bfloat16 and torch.equal(in_bf16.float(), already)
        # a mask that is already additive (or no 4-D boolean) goes on untouched
        assert _hooked_call(model, first, positional=False, mask=already) is already
        flat = torch.ones(1, 3, dtype=torch.bool)
        assert _hooked_call(model, first, positional=False, mask=flat) is flat


def test_steps_aside_where_it_cannot_match(family_policy):
    model, _ = family_policy("qwen2_5_vl")
    attention = _text_attentions(model)[0]
    assert am.why_not_shared(attention) is None
    vision = next(m for n, m in model.named_modules() if n.endswith("visual.blocks.0.attn"))
    assert "not a language-model attention" in am.why_not_shared(vision)
    impl = attention.config._attn_implementation
    try:
        attention.config._attn_implementation = "eager"  # eager adds a float mask itself
        assert "not sdpa" in am.why_not_shared(attention)
    finally:
        attention.config._attn_implementation = impl
    assert_swaps_nothing_without_grad_autocast_or_the_setting(am.masks_once, model)
    with am.masks_once(model) as n:
        assert n == len(_text_attentions(model)) and attention._forward_pre_hooks
    assert not attention._forward_pre_hooks


def test_gradient_checkpointing_steps_aside_and_still_trains(family_policy):
    """Checkpointed layers are recomputed in the backward, after the hooks are gone: no hook is set,
    and the gradients equal the plain forward's."""
    model, processor = family_policy("qwen2_5_vl")
    engine, inputs, ids, mask = _batch(model, processor, "image")
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])

    def fn(on):
        return lambda: completion_logprobs(model, inputs, ids, mask, with_entropy=True, mask_once=on)

    model.train()
    try:
        _, _, g0, _, _ = _run(model, fn(False), weights, mask)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        assert am.eligible_attentions(model) == []
        _, _, g1, _, _ = _run(model, fn(True), weights, mask)
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
        model.zero_grad(set_to_none=True)
    assert g0.keys() == g1.keys()
    assert max((g0[k] - g1[k]).abs().max().item() for k in g0) < 1e-6


def test_the_warm_start_loss_passes_its_settings_on(family_policy, monkeypatch):
    """`sft_loss` hands `recompute_mlp`, `mask_once` and `recompute_norm` to the forward (the warm start's test stubs
    sft_loss itself), and the masks are made additive in the warm start's forward when on."""
    from mmrlvr.tasks import load_task
    from mmrlvr.train import sft

    model, processor = family_policy("qwen2_5_vl")
    seen, made = [], []
    real, real_made = sft.completion_logprobs, am.additive_mask
    monkeypatch.setattr(sft, "completion_logprobs", lambda *a, **kw: (
        seen.append((kw["options"].recompute_mlp, kw["options"].mask_once, kw["options"].recompute_norm)), real(*a, **kw))[1])
    monkeypatch.setattr(am, "additive_mask", lambda m, d: (made.append(1), real_made(m, d))[1])
    batch = load_task("counting", "train", 4, 0)
    batch[1] = dataclasses.replace(batch[1], target=batch[1].target + " Counted twice.")  # padding: a mask
    model.train()
    try:
        for recompute, once in ((True, False), (False, True)):
            made.clear()
            sft.sft_loss(model, processor, batch, recompute_mlp=recompute, mask_once=once,
                         recompute_norm=once).backward()
            assert bool(made) == once
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert seen == [(True, False, False), (False, True, True)]


def test_a_lora_policy_gets_the_same_numbers(family_policy):
    """mmrlvr's LoRA wraps the projections inside the attention modules, not the modules: the mask
    is shared there too, and the adapters' gradients are the same bit for bit."""
    model, processor = family_policy("qwen2_5_vl", lora_rank=4)
    engine, inputs, ids, mask = _batch(model, processor, "image")
    layers = model.config.get_text_config().num_hidden_layers
    assert len(am.eligible_attentions(model)) == layers
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])

    def fn(on):
        return lambda: completion_logprobs(model, inputs, ids, mask, with_entropy=True, prompt_once=True, mask_once=on)

    off, on = _off_and_on(model, fn, weights, mask)
    assert all("lora" in k for k in off[2])
    _assert_shared(off, on, layers, 2)
