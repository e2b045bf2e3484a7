"""The gated MLPs with activation and product recomputed in the backward (`mmrlvr.models.patches.gated_mlp`),
in every tiny family: bit-identical log-probs, entropies and parameter gradients through the
learner's forward (joined and prompt-once, image and video, mixed completion lengths, temperature
0.8, an entropy term, one frozen down_proj), exactly two fewer (n, T, I) tensors kept per layer,
and the forwards put back afterwards. Plus where it steps aside."""

from __future__ import annotations

import functools

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts, select_rows
from mmrlvr.models.families import FAMILIES
from mmrlvr.models.wrapping import base_model
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.models.patches import gated_mlp as gm
from mmrlvr.train.logprobs import completion_logprobs
from tests.models.test_family_prompt_once import G, ROWS, VIDEO_FAMILIES
from tests.rollout.test_shared_prefill import mixed_prompts
from tests.models.test_swaps import assert_swaps_nothing_without_grad_autocast_or_the_setting


def _batch(model, processor, media):
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(mixed_prompts(media), G, RolloutConfig(temperature=1.4, max_new_tokens=10), seed=3)
    inputs = select_rows(repeat_prompts(out.prompt_inputs, G), ROWS)
    ids, mask = out.completion_ids[ROWS], out.completion_mask[ROWS].clone()
    mask[0, 4:] = 0  # completions of mixed lengths
    mask[3, 7:] = 0
    return engine, inputs, ids.masked_fill(mask == 0, engine.pad_id), mask


def _text_mlps(model):
    return [m for n, m in base_model(model).named_modules() if type(m).__name__ in gm.GATED_MLPS]


def _intermediate(model) -> int:
    return _text_mlps(model)[0].down_proj.in_features


def _run(model, fn, weights, mask, intermediate: int):
    """Log-probs, entropies, gradients, the bytes of (..., I) tensors autograd kept, and the
    positions each language-model MLP call saw (a hook on gate_proj, which is never swapped)."""
    kept, positions = [], []
    weights_at = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):  # activations only: a weight (or its transpose) is saved as a view of the parameter
        if (t.dim() >= 2 and t.shape[-1] == intermediate and t.dtype.is_floating_point
                and t.untyped_storage().data_ptr() not in weights_at):
            kept.append(t.numel() * t.element_size())
        return t

    hooks = [m.gate_proj.register_forward_hook(
        lambda mod, args, out, i=i: positions.append((i, args[0].shape[:-1].numel())))
        for i, m in enumerate(_text_mlps(model))]
    model.zero_grad(set_to_none=True)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, ent = fn()
    finally:
        for h in hooks:
            h.remove()
    ((lp * weights[:, None] + 2.5 * ent) * mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), ent.detach(), grads, (sum(kept), len(kept)), positions


@pytest.mark.parametrize("model_type,media", [(f, "image") for f in FAMILIES] + [(f, "video") for f in VIDEO_FAMILIES])
@pytest.mark.parametrize("once", [False, True], ids=["joined", "prompt_once"])
def test_recomputed_mlps_give_the_same_numbers_and_keep_half(model_type, media, once, family_policy):
    model, processor = family_policy(model_type)
    engine, inputs, ids, mask = _batch(model, processor, media)
    mlps = _text_mlps(model)
    layers = model.config.get_text_config().num_hidden_layers
    assert len(mlps) == layers and len(gm.eligible_mlps(model)) == layers  # the language model's, nothing else
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])
    inter = _intermediate(model)
    frozen = mlps[1].down_proj.weight

    def fn(recompute):
        return lambda: completion_logprobs(model, inputs, ids, mask, temperature=0.8, suppress_ids=engine.suppress_ids,
                                           with_entropy=True, prompt_once=once, recompute_mlp=recompute)

    model.train()
    frozen.requires_grad_(False)
    try:
        lp0, ent0, g0, kept0, pos0 = _run(model, fn(False), weights, mask, inter)
        lp1, ent1, g1, kept1, pos1 = _run(model, fn(True), weights, mask, inter)
    finally:
        frozen.requires_grad_(True)
        model.eval()
        model.zero_grad(set_to_none=True)
    assert torch.equal(lp0, lp1) and torch.equal(ent0, ent1)
    assert g0.keys() == g1.keys() and not any(p is frozen for p in model.parameters() if p.grad is not None)
    assert all(torch.equal(g0[k], g1[k]) for k in g0), [k for k in g0 if not torch.equal(g0[k], g1[k])]
    # autograd kept gate, act(gate), up and the product per MLP call; now gate and up only
    # (the frozen down_proj's matmul kept no input before either: there the saving is one tensor)
    assert pos0 == pos1 and len(pos0) >= layers
    fewer = [(1 if i == 1 else 2, n) for i, n in pos0]
    assert kept0[0] - kept1[0] == sum(k * n for k, n in fewer) * inter * lp0.new_empty(0).element_size()
    assert kept0[1] - kept1[1] == sum(k for k, _ in fewer)
    assert all("forward" not in m.__dict__ for m in mlps)  # put back


def test_steps_aside_where_it_cannot_match(family_policy):
    model, _ = family_policy("qwen2_5_vl")
    mlp = _text_mlps(model)[0]
    assert gm.why_not_recomputed(mlp) is None
    vision = next(m for n, m in model.named_modules() if n.endswith("visual.blocks.0.mlp"))
    assert gm.why_not_recomputed(vision) is not None  # not a known gated MLP (and its down_proj has a bias)

    handle = mlp.register_forward_hook(lambda *a: None)
    try:
        assert "hooks on the MLP" in gm.why_not_recomputed(mlp)
    finally:
        handle.remove()
    handle = mlp.down_proj.register_forward_pre_hook(lambda *a: None)
    try:
        assert "hooks on down_proj" in gm.why_not_recomputed(mlp)
        assert mlp not in gm.eligible_mlps(model)
    finally:
        handle.remove()
    act = mlp.act_fn
    try:
        mlp.act_fn = torch.nn.GELU()
        assert "activation" in gm.why_not_recomputed(mlp)
    finally:
        mlp.act_fn = act
    down = mlp.down_proj
    try:
        mlp.down_proj = torch.nn.Linear(down.in_features, down.out_features, bias=True)
        assert "bias" in gm.why_not_recomputed(mlp)
    finally:
        mlp.down_proj = down

    assert_swaps_nothing_without_grad_autocast_or_the_setting(gm.recomputed_gated_mlps, model)
    with gm.recomputed_gated_mlps(model) as n:
        assert n == len(_text_mlps(model)) and "forward" in mlp.__dict__
    assert "forward" not in mlp.__dict__


def test_activation_kinds():
    from transformers.activations import GELUTanh, SiLUActivation

    assert gm.activation_kind(SiLUActivation()) == "silu"
    assert gm.activation_kind(torch.nn.SiLU()) == "silu"
    assert gm.activation_kind(GELUTanh()) == "gelu_tanh"
    assert gm.activation_kind(GELUTanh(use_gelu_tanh_python=True)) is None  # another rounding
    assert gm.activation_kind(torch.nn.GELU()) is None
    swapped = SiLUActivation()
    swapped.forward = functools.partial(torch.nn.functional.gelu, approximate="tanh")
    assert gm.activation_kind(swapped) is None


@pytest.mark.parametrize("kind", ["silu", "gelu_tanh"])
def test_function_against_autograd_in_bfloat16_with_a_noncontiguous_gradient(kind):
    """The custom backward replays autograd's ops: equal bit for bit, also in bfloat16 and when the
    incoming gradient is a transposed view."""
    g = torch.Generator().manual_seed(0)
    gate = torch.randn(3, 5, 24, generator=g, dtype=torch.bfloat16, requires_grad=True)
    up = torch.randn(3, 5, 24, generator=g, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(16, 24, generator=g, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(5, 3, 16, generator=g, dtype=torch.bfloat16).transpose(0, 1)

    ref = torch.nn.functional.linear(gm._act(kind, gate) * up, w)
    ref_grads = torch.autograd.grad(ref, (gate, up, w), grad)
    out = gm._GatedDown.apply(gate, up, w, kind)
    grads = torch.autograd.grad(out, (gate, up, w), grad)
    assert torch.equal(out, ref)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


def test_sharded_parameters_step_aside(family_policy, monkeypatch):
    """FSDP2 / ZeRO-3: parameters are gathered inside wrapped forwards; the swap is not attempted."""
    model, _ = family_policy("gemma3")
    assert gm.eligible_mlps(model)
    monkeypatch.setattr(gm, "params_sharded", lambda m: True)
    assert gm.eligible_mlps(model) == []


def test_gradient_checkpointing_steps_aside_and_still_trains(family_policy):
    """Checkpointed layers are recomputed in the backward, after the swap is undone: the swap is
    not made, and the gradients equal the plain forward's."""
    model, processor = family_policy("qwen2_5_vl")
    engine, inputs, ids, mask = _batch(model, processor, "image")
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])
    inter = _intermediate(model)

    def fn(recompute):
        return lambda: completion_logprobs(model, inputs, ids, mask, with_entropy=True, recompute_mlp=recompute)

    model.train()
    try:
        _, _, g0, _, _ = _run(model, fn(False), weights, mask, inter)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        assert gm.eligible_mlps(model) == []
        _, _, g1, _, _ = _run(model, fn(True), weights, mask, inter)
    finally:
        model.gradient_checkpointing_disable()
        model.eval()
        model.zero_grad(set_to_none=True)
    assert g0.keys() == g1.keys()
    assert max((g0[k] - g1[k]).abs().max().item() for k in g0) < 1e-6


def test_lora_on_down_proj_steps_aside(family_policy):
    """mmrlvr's LoRA wraps every language-model projection, down_proj included: the MLPs keep
    their own forward (the adapter's path is not the plain matmul the function replays)."""
    model, _ = family_policy("qwen2_5_vl", lora_rank=4)
    mlps = _text_mlps(model)
    assert mlps and all("not a plain Linear" in gm.why_not_recomputed(m) for m in mlps)
    assert gm.eligible_mlps(model) == []
