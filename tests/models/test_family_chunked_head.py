"""The output layer in blocks (`mmrlvr.models.patches.chunked_head`) against whole logits, in every tiny family: the
same log-probs, entropies and parameter gradients, through the joined forward and the prompt-once
forward, with blocks of 16 positions (so a block ends inside a row) over mixed completion lengths;
no call of the output layer ever sees more than one block, in the forward or the backward."""

from __future__ import annotations

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts, select_rows
from mmrlvr.models.families import FAMILIES
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.models.patches import chunked_head as headmod
from mmrlvr.train import logprobs as lpmod
from mmrlvr.train.logprobs import completion_logprobs
from tests.models.test_family_prompt_once import G, ROWS
from tests.rollout.test_shared_prefill import mixed_prompts

BLOCK_POSITIONS = headmod.MIN_BLOCK_POSITIONS  # 16 of the 60 positions: blocks end inside rows


def _grads(model, fn, weights, mask, entropy_weight: float = 0.0):
    """A loss of per-row weighted log-probs (and entropies: the entropy bonus's gradient)."""
    model.zero_grad(set_to_none=True)
    lp, ent = fn()
    ((lp * weights[:, None] + entropy_weight * ent) * mask).sum().backward()
    return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def small_blocks(monkeypatch):
    def set_for(model):
        v = headmod.vocab_size(headmod.output_layer(model))
        monkeypatch.setattr(lpmod, "CHUNK_ELEMENTS", BLOCK_POSITIONS * v)
        return v
    return set_for


def _batch(model, processor, media="image"):
    engine = HFRolloutEngine(model, processor)
    out = engine.rollout(mixed_prompts(media), G, RolloutConfig(temperature=1.4, max_new_tokens=10), seed=3)
    inputs = select_rows(repeat_prompts(out.prompt_inputs, G), ROWS)
    ids, mask = out.completion_ids[ROWS], out.completion_mask[ROWS].clone()
    mask[0, 4:] = 0  # one shorter completion
    return engine, inputs, ids.masked_fill(mask == 0, engine.pad_id), mask


@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("once", [False, True], ids=["joined", "prompt_once"])
def test_blocks_equal_whole_logits(model_type, once, family_policy, small_blocks):
    model, processor = family_policy(model_type)
    engine, inputs, ids, mask = _batch(model, processor)
    small_blocks(model)
    assert headmod.why_not_chunked(model, ids.numel(), lpmod.CHUNK_ELEMENTS) is None
    weights = torch.tensor([1.0, -0.5, 2.0, 0.25, -1.5, 0.75])
    seen = []  # positions per block of logits made

    def run(chunked: bool):
        return completion_logprobs(model, inputs, ids, mask, temperature=0.8, suppress_ids=engine.suppress_ids,
                                   with_entropy=True, prompt_once=once, chunked_head=chunked)

    real = headmod.block_logits
    model.train()
    try:
        lp_ref, ent_ref, g_ref = _grads(model, lambda: run(False), weights, mask)
        headmod.block_logits = lambda h, *a: (seen.append(h.shape[0]), real(h, *a))[1]
        lp, ent, g = _grads(model, lambda: run(True), weights, mask, entropy_weight=2.5)
        _, _, g_ref = _grads(model, lambda: run(False), weights, mask, entropy_weight=2.5)
    finally:
        headmod.block_logits = real
        model.eval()
        model.zero_grad(set_to_none=True)
    n_blocks = -(-ids.numel() // BLOCK_POSITIONS)
    assert max(seen) == BLOCK_POSITIONS and len(seen) == 2 * n_blocks  # each block twice: forward, recompute
    m = mask.bool()
    assert (lp[m] - lp_ref[m]).abs().max() < 1e-5, model_type
    assert (ent[m] - ent_ref[m]).abs().max() < 1e-5, model_type
    assert g.keys() == g_ref.keys()
    for name in g_ref:
        diff, size = float((g[name] - g_ref[name]).norm()), float(g_ref[name].norm())
        assert diff <= 1e-4 * size + 1e-6, (model_type, name, diff, size)


def test_without_grad_blocks_run_once_and_entropy_alone_has_no_graph(tiny, small_blocks):
    model, processor = tiny
    engine, inputs, ids, mask = _batch(model, processor)
    small_blocks(model)
    with torch.no_grad():
        ref, ent_ref = completion_logprobs(model, inputs, ids, mask, temperature=0.8, with_entropy=True,
                                           suppress_ids=engine.suppress_ids)
        lp, ent = completion_logprobs(model, inputs, ids, mask, temperature=0.8, with_entropy=True,
                                      suppress_ids=engine.suppress_ids, chunked_head=True)
    assert (lp - ref).abs().max() < 1e-5 and (ent - ent_ref).abs().max() < 1e-5
    model.train()
    try:
        lp, ent = completion_logprobs(model, inputs, ids, mask, with_entropy=True, entropy_grad=False,
                                      suppress_ids=engine.suppress_ids, chunked_head=True)
    finally:
        model.eval()
    assert lp.requires_grad and not ent.requires_grad


def test_where_whole_logits_are_kept(tiny, small_blocks, monkeypatch):
    model, processor = tiny
    engine, inputs, ids, mask = _batch(model, processor)
    v = small_blocks(model)
    assert headmod.why_not_chunked(model, BLOCK_POSITIONS, BLOCK_POSITIONS * v) == "the logits fit in one block"
    assert headmod.why_not_chunked(model, BLOCK_POSITIONS + 1, BLOCK_POSITIONS * v) is None
    text = model.config.get_text_config()
    monkeypatch.setattr(text, "final_logit_softcapping", 30.0, raising=False)
    assert "final_logit_softcapping" in headmod.why_not_chunked(model, 100, BLOCK_POSITIONS * v)
    calls = []  # softcapped: the model's own output layer runs once, on all positions
    h = headmod.output_layer(model).register_forward_hook(lambda mod, i, o: calls.append(o.shape[-1]))
    try:
        with torch.no_grad():
            completion_logprobs(model, inputs, ids, mask, suppress_ids=engine.suppress_ids, chunked_head=True)
    finally:
        h.remove()
    assert calls == [v]
    layer = headmod.output_layer(model)
    monkeypatch.setattr(layer, "_hf_hook", object(), raising=False)
    assert "accelerate hooks" in headmod.why_not_chunked(model, 100, BLOCK_POSITIONS * v)
    monkeypatch.delattr(layer, "_hf_hook")
    monkeypatch.setattr(headmod, "params_sharded", lambda m: True)
    monkeypatch.setattr(text, "final_logit_softcapping", None)
    assert "sharded" in headmod.why_not_chunked(model, 100, BLOCK_POSITIONS * v)


def test_the_output_layer_is_put_back(tiny):
    model, _ = tiny
    head = headmod.output_layer(model)
    with headmod.kept_head_input(head) as kept:
        out = head(torch.ones(2, 3, head.in_features))
        assert out.shape == (2, 3, 0) and kept["hidden"].shape == (2, 3, head.in_features)
    assert "forward" not in head.__dict__ and head(torch.ones(1, head.in_features)).shape == (1, headmod.vocab_size(head))
    own = lambda x: x  # noqa: E731 (an instance-level forward, as accelerate's hooks set)
    head.forward = own
    try:
        with headmod.kept_head_input(head):
            pass
        assert head.__dict__["forward"] is own
    finally:
        del head.forward


def test_a_wide_vocabulary_against_float64():
    """Qwen's 151,936 entries, most of them one repeated row (as a widened vocabulary's), a bias, temperature
    0.7, suppressed ids: against a float64 autograd reference, log-probs and entropies agree to
    2e-5 (relative to their size), the gradients of a loss using both to 1e-4 of the largest entry
    (each sums 151,936 fp32 products)."""
    g = torch.Generator().manual_seed(0)
    v, h, p = 151_936, 16, 40
    layer = torch.nn.Linear(h, v, bias=True)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(v, h, generator=g) * 0.3)
        layer.weight[600:] = layer.weight[599]
        layer.bias.copy_(torch.randn(v, generator=g) * 0.1)
        layer.bias[600:] = -6.0  # the copies are unlikely one by one and hold a share together
    hidden0 = torch.randn(1, p, h, generator=g)
    targets = torch.randint(0, 600, (1, p), generator=g)
    suppress = [3, 7, 40_000]
    w_lp, w_ent = torch.randn(1, p, generator=g), torch.randn(1, p, generator=g) * 3
    hidden = hidden0.clone().requires_grad_()
    lp, ent = headmod.head_logprobs(layer, hidden, targets, 0.7, suppress, True, True, 3 * v)  # blocks of 16, 16, 8
    (lp * w_lp + ent * w_ent).sum().backward()
    got = [t.detach().double() for t in (lp, ent, hidden.grad, layer.weight.grad, layer.bias.grad)]
    hd, wd, bd = (t.detach().double().requires_grad_() for t in (hidden0, layer.weight, layer.bias))
    x = ((hd @ wd.T + bd) / 0.7).index_fill(-1, torch.tensor(suppress), -float("inf"))
    lse = torch.logsumexp(x, -1)
    lp64 = x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    ent64 = lse - (torch.softmax(x, -1) * torch.where(torch.isinf(x), torch.zeros_like(x), x)).sum(-1)
    (lp64 * w_lp + ent64 * w_ent).sum().backward()
    ref = [t.detach() for t in (lp64, ent64, hd.grad, wd.grad, bd.grad)]
    for name, a, b, tol in zip(("lp", "entropy", "hidden grad", "weight grad", "bias grad"), got, ref,
                               (2e-5, 2e-5, 1e-4, 1e-4, 1e-4)):
        err, size = float((a - b).abs().max()), max(1.0, float(b.abs().max()))
        assert err <= tol * size, (name, err, size)


def test_the_warm_start_loss_uses_blocks_where_logits_are_wide(tiny, small_blocks):
    """The supervised warm start's loss (teacher tokens' mean NLL) runs the output layer in blocks
    too, with the same value and gradient as whole logits; `train.chunked_head=false` reaches it
    (blocks small enough to apply, and none made)."""
    from mmrlvr.tasks import load_task
    from mmrlvr.train.sft import sft_loss

    model, processor = tiny
    batch = load_task("counting", "train", 4, 0)
    whole = {}
    model.train()
    try:
        for blocks in (False, True):
            if blocks:
                small_blocks(model)
            seen = []
            real = headmod.block_logits
            headmod.block_logits = lambda h, *a: (seen.append(h.shape[0]), real(h, *a))[1]
            try:
                model.zero_grad(set_to_none=True)
                loss = sft_loss(model, processor, batch)
                loss.backward()
            finally:
                headmod.block_logits = real
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            assert bool(seen) == blocks
            whole[blocks] = (float(loss), grads)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert whole[True][0] == pytest.approx(whole[False][0], rel=1e-6)
    for name, g in whole[False][1].items():
        assert float((whole[True][1][name] - g).norm()) <= 1e-4 * float(g.norm()) + 1e-6, name
    seen = []
    real = headmod.block_logits
    headmod.block_logits = lambda h, *a: (seen.append(h.shape[0]), real(h, *a))[1]
    try:
        with torch.no_grad():
            off = sft_loss(model, processor, batch, chunked_head=False)
    finally:
        headmod.block_logits = real
    assert seen == [] and float(off) == pytest.approx(whole[False][0], rel=1e-6)


def test_the_warm_start_reads_train_chunked_head(monkeypatch, tmp_path):
    """`prepare_policy` hands `train.chunked_head` (it used to always block) and
    `train.recompute_mlp`, `train.mask_once` and `train.recompute_norm` to the warm start."""
    from mmrlvr.config import load_config
    from mmrlvr.tasks import load_task
    from mmrlvr.train import sft
    from mmrlvr.train.progress import Progress
    from mmrlvr.train.setup import prepare_policy

    seen = []
    real = sft.sft_loss
    monkeypatch.setattr(sft, "sft_loss", lambda m, p, b, o: (
        seen.append((o.chunked_head, o.recompute_mlp, o.mask_once, o.recompute_norm)), real(m, p, b, o))[1])
    for chunked, recompute, once in (("false", "true", "false"), ("true", "false", "true")):
        cfg = load_config("configs/quickstart.yaml", [f"output_dir={tmp_path / chunked}", "warm_start.steps=1",
                                                      "warm_start.batch_size=2", f"train.chunked_head={chunked}",
                                                      f"train.recompute_mlp={recompute}",
                                                      f"train.mask_once={once}",
                                                      f"train.recompute_norm={recompute}"])
        (tmp_path / chunked).mkdir()
        prepare_policy(cfg, None, load_task("counting", "train", 4, 0), tmp_path / chunked,
                       Progress(0, enabled=False))
    assert seen == [(False, True, False, True), (True, False, True, False)]
