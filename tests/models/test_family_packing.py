"""Padding-free forwards (`train.padding_free`, `mmrlvr.models.packing`) against the padded joined
forward in the tiny Qwen families: per-token log-probs, entropies and the parameter gradient of a
loss with per-row weights, with text only, one image, two images in one prompt, video, and these
mixed in one micro-batch; prompts of different lengths (left padding) and completions of mixed
lengths. The other families refuse."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.config.schema import ConfigError
from mmrlvr.data.collate import repeat_prompts, select_rows
from mmrlvr.models.families import FAMILIES
from mmrlvr.models.packing import PACKED_FAMILIES
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.logprobs import completion_logprobs
from tests.rollout.test_shared_prefill import mixed_prompts

G = 3
ROWS = [8, 1, 4, 2, 5, 3]  # rows of all three prompts, out of order


def two_images_first(samples):
    """The prompts of `mixed_prompts("image")` with the first one showing two images (its own and
    the second prompt's): a row whose 3-D positions run over two image blocks."""
    first = samples[0]
    msg = dict(first.messages[-1])
    msg["content"] = [{"type": "image"}, *msg["content"]]
    return [dataclasses.replace(first, messages=(*first.messages[:-1], msg), images=(*first.images, *samples[1].images)),
            *samples[1:]]


def text_only(samples):
    """The prompts without their images: rows whose rotary positions are 1-D only."""
    out = []
    for s in samples:
        msg = dict(s.messages[-1])
        msg["content"] = [p for p in msg["content"] if p["type"] != "image"]
        out.append(dataclasses.replace(s, messages=(*s.messages[:-1], msg), images=()))
    return out


PROMPTS = {"text": lambda: text_only(mixed_prompts("image")), "image": lambda: mixed_prompts("image"), "two_images": lambda: two_images_first(mixed_prompts("image")),
           "video": lambda: mixed_prompts("video"),
           # one micro-batch of a two-image row, a text-only row and a one-image row
           "mixed": lambda: [two_images_first(mixed_prompts("image"))[0], text_only(mixed_prompts("image"))[1],
                             mixed_prompts("image")[2]]}


def _rows(model, processor, media):
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(PROMPTS[media](), G, RolloutConfig(temperature=1.4, max_new_tokens=10), seed=3)
    inputs = select_rows(repeat_prompts(out.prompt_inputs, G), ROWS)
    ids, mask = out.completion_ids[ROWS], out.completion_mask[ROWS].clone()
    mask[0, 4:] = 0  # completions of 4, 7 and 10 tokens
    mask[3, 7:] = 0
    return engine, inputs, ids.masked_fill(mask == 0, engine.pad_id), mask


def _grads(model, fn, weights, mask):
    model.zero_grad(set_to_none=True)
    lp, ent = fn()
    (lp * weights[:, None] * mask).sum().backward()
    return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("chunked_head", [False, True], ids=["logits", "chunked_head"])
@pytest.mark.parametrize("model_type,media", [(f, m) for f in PACKED_FAMILIES for m in PROMPTS])
def test_the_packed_forward_equals_the_padded_one(model_type, media, chunked_head, family_policy, monkeypatch):
    model, processor = family_policy(model_type)
    engine, inputs, ids, mask = _rows(model, processor, media)
    assert (inputs["attention_mask"] == 0).any() and (mask == 0).any()  # padding on both sides to skip
    fed = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])

    def run(packed: bool):
        return completion_logprobs(model, inputs, ids, mask, temperature=0.8, suppress_ids=engine.suppress_ids,
                                   with_entropy=True, chunked_head=chunked_head, padding_free=packed)

    model.train()
    try:
        lp_ref, ent_ref, g_ref = _grads(model, lambda: run(False), weights, mask)
        lp, ent, g = _grads(model, lambda: run(True), weights, mask)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
        handle.remove()
    real = int(inputs["attention_mask"].sum() + mask.sum())
    assert fed == [(len(ROWS), inputs["input_ids"].shape[1] + ids.shape[1]), (1, real)]  # one packed row of real tokens
    m = mask.bool()
    assert (lp[m] - lp_ref[m]).abs().max() < 1e-4, model_type
    assert (ent[m] - ent_ref[m]).abs().max() < 1e-4, model_type
    assert g.keys() == g_ref.keys()
    for name in g_ref:
        diff, size = float((g[name] - g_ref[name]).norm()), float(g_ref[name].norm())
        assert diff <= 1e-4 * size + 1e-6, (model_type, name, diff, size)
    assert any("vis" in n for n in g_ref) or media == "text"


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_row_never_sees_the_row_packed_before_it(family_policy, attention):
    """The last row's log-probs are the same whatever row is packed before it (causal attention
    across rows would let the first row change them), with either attention implementation."""
    model, processor = family_policy("qwen2_5_vl", attn_implementation=attention)
    assert model.config._attn_implementation == attention
    engine, inputs, ids, mask = _rows(model, processor, "two_images")
    last = [0, 5]  # a 1-image row after the 2-image row, then after another prompt's row
    other = [1, 5]
    with torch.no_grad():
        a = completion_logprobs(model, select_rows(inputs, last), ids[last], mask[last], padding_free=True)[0]
        b = completion_logprobs(model, select_rows(inputs, other), ids[other], mask[other], padding_free=True)[0]
        alone = completion_logprobs(model, select_rows(inputs, [5]), ids[[5]], mask[[5]])[0]
    torch.testing.assert_close(a[1], alone[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(b[1], alone[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_type", sorted(set(FAMILIES) - set(PACKED_FAMILIES)))
def test_other_families_are_refused_in_one_line(model_type, family_policy):
    model, processor = family_policy(model_type)
    engine, inputs, ids, mask = _rows(model, processor, "image")
    with pytest.raises(ConfigError) as err:
        completion_logprobs(model, inputs, ids, mask, padding_free=True)
    assert str(err.value) == (f"train.padding_free=true: the {model_type} family is not checked for packed rows "
                              f"(packed: qwen2_5_vl, qwen2_vl, qwen3_vl); set train.padding_free: false")


def test_a_completion_mask_with_holes_runs_the_padded_forward(family_policy):
    """An episode's mask that leaves out tokens inside a completion cannot be packed (the packed row
    would drop them, the padded forward only hides them): that micro-batch runs padded, same numbers."""
    model, processor = family_policy("qwen2_5_vl")
    engine, inputs, ids, mask = _rows(model, processor, "image")
    mask[2, 3] = 0  # a hole after 3 tokens of a 10-token completion
    fed = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        with torch.no_grad():
            packed = completion_logprobs(model, inputs, ids, mask, padding_free=True)[0]
            padded = completion_logprobs(model, inputs, ids, mask)[0]
    finally:
        handle.remove()
    assert fed == [(len(ROWS), inputs["input_ids"].shape[1] + ids.shape[1])] * 2
    assert torch.equal(packed, padded)
