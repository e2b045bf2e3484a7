"""`train.padding_free` in the learner on the tiny model (Qwen2.5-VL): one RL update's gradient is
the padded update's, every forward feeds the model the rows' real tokens only (so a token budget
counts those and `train/padding_waste` reads 1.0), and the settings that cannot pack are refused
in one line before anything loads."""

from __future__ import annotations

import copy

import pytest
import torch
from accelerate import Accelerator

import mmrlvr.train.learner as learner_mod
from mmrlvr.cli import main
from mmrlvr.models.wrapping import base_model
from mmrlvr.train.learner import Learner, LogprobOptions, batch_lengths
from mmrlvr.train.micro_batches import forward_tokens
from mmrlvr.recipe.step import advantages_for
from tests.train.test_micro_batch_tokens import B, G, _batch, _cfg, _grads

CASES = {
    "grpo": ("grpo", "algo.entropy_coef=0.01"),  # token-mean, an entropy bonus (packed entropies)
    "gspo": ("gspo", "algo.mini_batches=2", "train.chunked_head=false"),  # sequence ratio, 2 optimizer steps
    "reinforce_pp": ("reinforce_pp",),  # a KL to the reference: its forwards pack too
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_update_gradient_equals_the_padded_one(tiny_dir, case):
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    preset, *extra = CASES[case]
    padded_cfg = _cfg(preset, *extra)
    batch, suppress = _batch(model, processor, padded_cfg)
    ref = copy.deepcopy(model).eval() if padded_cfg.algo.kl_coef > 0 else None
    padded, s_pad = _grads(model, batch, padded_cfg, suppress, ref)
    packed, s_pack = _grads(model, batch, _cfg(preset, *extra, "train.padding_free=true"), suppress, ref)
    assert len(padded) == len(packed) == padded_cfg.algo.mini_batches
    for g_pad, g_pack in zip(padded, packed):
        assert torch.sqrt(sum((a ** 2).sum() for a in g_pad)) > 1e-3  # something to compare
        for a, b in zip(g_pad, g_pack):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    assert s_pack["loss/policy"] == pytest.approx(s_pad["loss/policy"], rel=1e-5)
    assert s_pad["train/padding_waste"] > 1.1  # completions of 1 to 8 tokens padded to 8 (prompts once per group)
    assert s_pack["train/padding_waste"] == 1.0


def test_a_budget_counts_the_packed_tokens(tiny_dir, monkeypatch):
    """Each micro-batch's forwards (the reference's and the update's) feed one row of the real
    tokens, counted by a hook on the model: the budget's count, within the budget."""
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    budget = 150  # a row is 40 to 55 real tokens here; padded, 56
    cfg = _cfg("reinforce_pp", "train.padding_free=true", budget=budget)
    batch, suppress = _batch(model, processor, cfg)
    lengths = batch_lengths(model, batch, LogprobOptions.of(cfg, suppress))
    assert lengths.packed and not lengths.shared  # packing replaces prompt_once's forward
    model.train()
    fed: list[tuple[int, ...]] = []
    per_call: list[tuple[list[int], list]] = []
    ref = copy.deepcopy(model).eval()
    hooks = [base_model(m).register_forward_pre_hook(lambda _m, _a, kw: fed.append(tuple(kw["input_ids"].shape)),
                                                     with_kwargs=True) for m in (model, ref)]
    real = learner_mod.rows_logprobs

    def counted(model_, batch_, rows, *a, **k):
        fed.clear()
        out = real(model_, batch_, rows, *a, **k)
        per_call.append((list(rows), list(fed)))
        return out

    monkeypatch.setattr(learner_mod, "rows_logprobs", counted)
    stats = Learner(cfg, model, torch.optim.SGD(model.parameters(), lr=0.0), Accelerator(cpu=True), suppress,
                    ref_model=ref).update(batch, advantages_for(batch, cfg), seed=0)
    for h in hooks:
        h.remove()
    passes = int(stats["train/micro_batches"])
    assert passes >= 3 and len(per_call) == 2 * passes
    for rows, shapes in per_call:
        tokens = sum(lengths.prompt[r] + lengths.completion[r] for r in rows)
        assert shapes == [(1, tokens)], rows  # one packed row, no padding
        assert forward_tokens(lengths, rows) == (tokens, tokens)
        assert tokens <= budget or len(rows) == 1
    assert sorted(r for rows, _ in per_call[passes:] for r in rows) == list(range(B * G))
    assert stats["train/padding_waste"] == 1.0


def test_settings_that_cannot_pack_are_one_line_each(capsys):
    for over, why in [("model.path=tiny:gemma3", "the gemma3 family is not checked for packed rows "
                                                 "(packed: qwen2_5_vl, qwen2_vl, qwen3_vl)"),
                      ("model.attn_implementation=flash_attention_2", "attention flash_attention_2 is not checked "
                                                                       "for packed rows (packed: sdpa, eager)")]:
        assert main(["validate", "configs/quickstart.yaml", over, "train.padding_free=true"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"mmrlvr: error: train.padding_free=true: {why}; set train.padding_free: false"]
    assert main(["validate", "configs/quickstart.yaml", "model.path=tiny:gemma3"]) == 0  # off: nothing checked


def test_token_signals_forwards_pack_except_the_probed_ones(tiny):
    """Entropy and visual dependency (the clean and the corrupted log-prob forwards) run packed with
    the padded numbers; visual similarity, read from hooks on the (rows, positions) hidden states,
    keeps its padded forward."""
    from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts
    from mmrlvr.tasks import load_task
    from mmrlvr.methods.token_weighting.signals import black_fill, compute_signals
    from mmrlvr.train.sft import target_ids

    model, processor = tiny
    samples = load_task("counting", "train", 3, 0)
    inputs = repeat_prompts(encode_prompts(processor, samples), 2)
    ids, mask = pad_right([t for t in target_ids(processor.tokenizer, samples) for _ in range(2)],
                          processor.tokenizer.pad_token_id)
    mask[1, -3:] = 0  # a shorter completion
    ids = ids.masked_fill(mask == 0, processor.tokenizer.pad_token_id)
    fed: list[tuple[int, ...]] = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kw: fed.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    kw = dict(corrupt_prob=0.5, seed=11, fill=black_fill(processor), temperature=0.7)
    try:
        padded = compute_signals(model, inputs, ids, mask, ["entropy", "visual_dependency"], **kw)
        fed.clear()
        packed = compute_signals(model, inputs, ids, mask, ["entropy", "visual_dependency"], padding_free=True, **kw)
        real = int(inputs["attention_mask"].sum() + mask.sum())
        assert fed == [(1, real), (1, real)]  # the clean forward, then the corrupted one
        fed.clear()
        compute_signals(model, inputs, ids, mask, ["visual_similarity"], padding_free=True, **kw)
        assert fed == [(6, inputs["input_ids"].shape[1] + ids.shape[1])]
    finally:
        handle.remove()
    for name in ("entropy", "visual_dependency"):
        assert padded[name].abs().sum() > 0
        torch.testing.assert_close(packed[name], padded[name], rtol=0, atol=1e-4)


def test_packed_rows_cost_their_real_tokens_by_hand():
    """Prompts of 5, 3, 6 real tokens at width 6, completions of 2, 4, 1: padded, rows 0-1 cost
    2 x (6 + 4) = 20 for 14 real tokens; packed, 7 + 7 = 14 for 14. A budget of 15, rows taken
    longest completion first (1, 0, 2): packed, rows 1 and 0 fit together (14) and row 2 would make
    21; padded, 1 and 0 make 20 and 0 and 2 make 2 x (6 + 2) = 16, so each row runs alone."""
    from mmrlvr.train.micro_batches import RowLengths, pack_rows

    padded = RowLengths((2, 4, 1), (5, 3, 6), (0, 1, 2), 6, False)
    packed = RowLengths((2, 4, 1), (5, 3, 6), (0, 1, 2), 6, False, True)
    assert forward_tokens(padded, [0, 1]) == (20, 14)
    assert forward_tokens(packed, [0, 1]) == (14, 14)
    assert pack_rows(padded, [0, 1, 2], 15) == [[1], [0], [2]]
    assert pack_rows(packed, [0, 1, 2], 15) == [[0, 1], [2]]
