"""RMSNorms in bf16 keeping only their input for the backward (`mmrlvr.models.patches.rms_norm`), in every
tiny family whose norm this is: bit-identical log-probs, entropies and parameter gradients
through the learner's forward (joined and prompt-once, image and video, mixed completion lengths,
temperature 0.8, an entropy term, a LoRA policy with frozen norms), exactly the float32 copy and
the normed tensor fewer kept per call (less the input now kept), float32 untouched, and where it
steps aside."""

from __future__ import annotations

import pytest
import torch

from mmrlvr.models.families import FAMILIES
from mmrlvr.models.wrapping import base_model
from mmrlvr.models.patches import rms_norm as rn
from mmrlvr.train.logprobs import completion_logprobs
from tests.models.test_family_gated_mlp import _batch
from tests.models.test_family_prompt_once import VIDEO_FAMILIES
from tests.models.test_swaps import assert_swaps_nothing_without_grad_autocast_or_the_setting

NORMED = [f for f in FAMILIES if f != "gemma3"]  # Gemma 3's norm scales by (1 + weight) in float32: not swapped


def _norms(model):
    return [m for m in base_model(model).modules() if type(m).__name__ in rn.RMS_NORMS]


def _run(model, fn, weights, mask, monkeypatch):
    """Log-probs, entropies, gradients, the bytes autograd was handed to keep (each saved tensor
    counted where an op saves it, parameters excluded: no dependence on which storages are alive
    or share an address, as a count of distinct storages has), and (elements, hidden size, weight
    trainable) of every swapped call."""
    kept = []
    calls = []
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            kept.append(t.numel() * t.element_size())
        return t

    real = rn._RMSNorm.apply
    monkeypatch.setattr(rn._RMSNorm, "apply",
                        lambda x, w, eps: (calls.append((x.numel(), x.shape[-1], w.requires_grad, x.requires_grad)),
                                           real(x, w, eps))[1])
    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, ent = fn()
    monkeypatch.setattr(rn._RMSNorm, "apply", real)
    ((lp.float() * weights[:, None] + 2.5 * ent.float()) * mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), ent.detach(), grads, sum(kept), calls


def _saving(calls) -> int:
    """Bytes fewer handed over per call. Autograd: the float32 copy twice (the square and the product
    save it: 2 x 4 an element), the (.., 1) float32 root twice (the product and rsqrt) and, where the
    weight trains, the normed bf16 tensor (2); the swap: the bf16 input (2). A call whose input needs
    no gradient (a frozen vision tower's norm) keeps nothing either way."""
    return sum(8 * n + 8 * (n // h) + (2 * n if trains else 0) - 2 * n for n, h, trains, x_grad in calls if x_grad)


def _compare(model, processor, media, once, monkeypatch, lora=False):
    engine, inputs, ids, mask = _batch(model, processor, media)
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])

    def fn(on):
        return lambda: completion_logprobs(model, inputs, ids, mask, temperature=0.8, suppress_ids=engine.suppress_ids,
                                           with_entropy=True, prompt_once=once, recompute_norm=on)

    model.train()
    try:
        lp0, ent0, g0, kept0, calls0 = _run(model, fn(False), weights, mask, monkeypatch)
        lp1, ent1, g1, kept1, calls1 = _run(model, fn(True), weights, mask, monkeypatch)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert next(model.parameters()).dtype == torch.bfloat16 and not calls0 and calls1
    assert torch.equal(lp0, lp1) and torch.equal(ent0, ent1)
    assert g0.keys() == g1.keys() and (all("lora" in k for k in g0) if lora else g0)
    assert all(torch.equal(g0[k], g1[k]) for k in g0), [k for k in g0 if not torch.equal(g0[k], g1[k])]
    assert kept0 - kept1 == _saving(calls1)
    assert all("forward" not in m.__dict__ for m in _norms(model))  # put back
    return calls1


@pytest.mark.parametrize("model_type,media", [(f, "image") for f in NORMED] + [(f, "video") for f in VIDEO_FAMILIES])
@pytest.mark.parametrize("once", [False, True], ids=["joined", "prompt_once"])
def test_recomputed_norms_give_the_same_numbers_and_keep_less(model_type, media, once, family_policy, monkeypatch):
    model, processor = family_policy(model_type, dtype="bfloat16")
    assert len(rn.eligible_norms(model)) == len(_norms(model)) > 0
    calls = _compare(model, processor, media, once, monkeypatch)
    text = model.config.get_text_config()
    assert len(calls) >= 2 * text.num_hidden_layers + 1  # two per decoder layer and the final norm, at least
    assert any(trains for _, _, trains, _ in calls)


def test_a_lora_policy_with_frozen_norms(family_policy, monkeypatch):
    """LoRA freezes the norms: the normed tensor was not kept for a weight gradient, so the saving
    is the float32 copy and the root less the input; the adapters' gradients are the same."""
    model, processor = family_policy("qwen2_5_vl", lora_rank=4, dtype="bfloat16")
    calls = _compare(model, processor, "image", True, monkeypatch, lora=True)
    assert not any(trains for _, _, trains, _ in calls)


def test_float32_is_left_to_the_norm(family_policy, monkeypatch):
    """In float32 `x.to(float32)` is x itself: no norm is swapped, and a float32 input reaching a
    swapped norm is handed to the norm's own forward."""
    model, processor = family_policy("qwen2_5_vl")
    engine, inputs, ids, mask = _batch(model, processor, "image")
    assert all("float32" in rn.why_not_recomputed(m) for m in _norms(model))
    calls = []
    monkeypatch.setattr(rn._RMSNorm, "apply", lambda *a: calls.append(1))
    monkeypatch.setattr(rn, "eligible_norms", lambda m: _norms(m))  # swapped all the same
    model.train()
    try:
        with rn.recomputed_rms_norms(model) as n:
            completion_logprobs(model, inputs, ids, mask)
    finally:
        model.eval()
    assert n == len(_norms(model)) and not calls


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_function_against_autograd_with_a_residual_and_a_noncontiguous_gradient(dtype):
    """The norm inside a residual block (x reaches the loss through the norm and around it), against
    the plain expression: output and both gradients equal bit for bit; the weight frozen too."""
    g = torch.Generator().manual_seed(0)
    # ~1M elements and a hidden size that is no power of two: a float32 rounding change inside the
    # backward survives the cast to bf16 in a few elements only
    x0 = torch.randn(16, 64, 1000, generator=g, dtype=torch.float32).to(dtype).requires_grad_()
    w0 = (1 + 0.1 * torch.randn(1000, generator=g)).to(dtype).requires_grad_()
    grad = torch.randn(64, 16, 1000, generator=g, dtype=torch.float32).to(dtype).transpose(0, 1)

    def plain(x, w, eps):
        x32 = x.to(torch.float32)
        h = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        return w * h.to(x.dtype)

    # every combination of what trains (a norm after frozen embeddings: its input needs no
    # gradient, its weight does); eps 1e-2 is not the families' 1e-6, so an eps dropped or
    # replaced by a constant changes the output
    for x_trains, w_trains, eps in ((True, True, 1e-6), (True, False, 1e-6), (False, True, 1e-6), (True, True, 1e-2)):
        x0.requires_grad_(x_trains)
        w0.requires_grad_(w_trains)
        want = x0 * 3 + plain(x0, w0, eps)
        got = x0 * 3 + rn._RMSNorm.apply(x0, w0, eps)
        inputs = tuple(t for t, on in ((x0, x_trains), (w0, w_trains)) if on)
        assert torch.equal(got, want)
        got_grads = torch.autograd.grad(got, inputs, grad)
        assert all(g is not None for g in got_grads)
        assert all(torch.equal(a, b) for a, b in zip(got_grads, torch.autograd.grad(want, inputs, grad)))
    assert not torch.equal(rn._RMSNorm.apply(x0, w0, 1e-2), rn._RMSNorm.apply(x0, w0, 1e-6))


def test_steps_aside_where_it_cannot_match(family_policy):
    model, _ = family_policy("qwen2_5_vl", dtype="bfloat16")
    norm = _norms(model)[0]
    assert rn.why_not_recomputed(norm) is None
    gemma, _ = family_policy("gemma3", dtype="bfloat16")
    assert rn.eligible_norms(gemma) == []  # Gemma3RMSNorm: another formula
    for register in (norm.register_forward_hook, norm.register_forward_pre_hook):
        handle = register(lambda *a: None)
        try:
            assert "hooks" in rn.why_not_recomputed(norm)
        finally:
            handle.remove()
    assert rn.why_not_recomputed(norm) is None
    weight, eps = norm.weight, norm.variance_epsilon
    try:
        norm.weight = torch.nn.Parameter(torch.ones(2, weight.shape[0], dtype=weight.dtype))
        assert "1-D weight" in rn.why_not_recomputed(norm)
        norm.weight = weight
        norm.variance_epsilon = torch.tensor(eps)  # a tensor eps would be a float64 add, not the module's
        assert "variance_epsilon" in rn.why_not_recomputed(norm)
    finally:
        norm.weight, norm.variance_epsilon = weight, eps
    assert rn.why_not_recomputed(norm) is None
    assert_swaps_nothing_without_grad_autocast_or_the_setting(rn.recomputed_rms_norms, model)
    with rn.recomputed_rms_norms(model) as n:
        assert n == len(_norms(model)) and "forward" in norm.__dict__
        assert "forward is replaced" in rn.why_not_recomputed(norm)
    assert "forward" not in norm.__dict__
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        assert rn.eligible_norms(model) == []
    finally:
        model.gradient_checkpointing_disable()


def test_sharded_parameters_step_aside(family_policy, monkeypatch):
    model, _ = family_policy("qwen2_5_vl", dtype="bfloat16")
    assert rn.eligible_norms(model)
    monkeypatch.setattr(rn, "params_sharded", lambda m: True)
    assert rn.eligible_norms(model) == []
