"""`train.micro_batch_tokens` on the tiny model: the update's gradient is the one-micro-batch gradient
for every preset's aggregation, every forward computes at most the budget (counted from the
inputs the model really receives) and rows are grouped by length."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from accelerate import Accelerator

import mmrlvr.train.learner as learner_mod
from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.models.wrapping import base_model
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.train.learner import Learner, LogprobOptions, batch_lengths
from mmrlvr.train.micro_batches import forward_tokens
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import advantages_for, collect
from mmrlvr.verifiers.score import InProcessScorer

B, G, T = 3, 4, 8
# completion lengths per row (mixed, so micro-batches trim to their own longest) and rewards per group
LENGTHS = [8, 2, 7, 1, 3, 8, 2, 6, 5, 4, 1, 8]
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0]]


def _cfg(preset: str, *extra: str, budget=None):
    over = [f"rollout.prompts_per_step={B}", f"rollout.group_size={G}", f"rollout.max_new_tokens={T}",
            "train.max_grad_norm=1e9", f"algo.algorithm={preset}", *extra]
    if budget is not None:
        over.append(f"train.micro_batch_tokens={budget}")
    return resolve_config(load_config(None, over))


def _batch(model, processor, cfg):
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 16, 0), 0), InProcessScorer(),
                    dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, dynamic_sampling=False)), seed=0)
    batch.rewards = torch.tensor(REWARDS)
    t = batch.completion_mask.shape[1]
    assert t == T  # the untrained policy fills every row; the lengths below are set by hand
    lengths = torch.tensor(LENGTHS)
    batch.completion_mask = (torch.arange(t)[None] < lengths[:, None]).to(batch.completion_mask.dtype)
    batch.completion_ids = torch.where(batch.completion_mask.bool(), batch.completion_ids, engine.pad_id)
    batch.truncated = lengths == T  # the rows cut short stopped; the three of T tokens ran out
    return batch, engine.suppress_ids


def _grads(model, batch, cfg, suppress, ref=None):
    """Each optimizer step's gradients (float32 copies) and the update's stats. SGD at lr 0: every
    step sees the same weights, so two runs' steps compare one to one."""
    model = copy.deepcopy(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0)
    steps = []
    opt.register_step_pre_hook(lambda *_: steps.append(
        [p.grad.detach().float().clone() if p.grad is not None else torch.zeros(p.shape) for p in params]))
    learner = Learner(cfg, model, opt, Accelerator(cpu=True), suppress, ref_model=ref)
    stats = learner.update(batch, advantages_for(batch, cfg), seed=0)
    return steps, stats


CASES = {
    "grpo": ("grpo", "algo.entropy_coef=0.01"),  # token-mean, an entropy bonus on every row
    "dr_grpo": ("dr_grpo", "train.chunked_head=false", "train.recompute_mlp=false", "algo.mask_truncated=true"),  # seq-mean-token-sum-norm
    "dapo": ("dapo", "algo.mini_batches=2"),  # token-mean, clip-higher, 2 optimizer steps
    "gspo": ("gspo", "algo.mini_batches=2", "train.prompt_once=false"),  # sequence ratio, seq-mean-token-mean
    "reinforce_pp": ("reinforce_pp",),  # a KL to the reference: its forwards are packed too
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_gradient_equals_the_one_micro_batch_gradient(tiny_dir, case, dtype):
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    model.to(dtype)
    preset, *extra = CASES[case]
    one = _cfg(preset, *extra)
    batch, suppress = _batch(model, processor, one)
    ref = copy.deepcopy(model).eval() if one.algo.kl_coef > 0 else None
    whole, s1 = _grads(model, batch, one, suppress, ref)
    # a budget of a third of one forward over every row: several micro-batches per mini-batch
    budget = forward_tokens(batch_lengths(model, batch, LogprobOptions.of(one, suppress)), range(B * G))[0] // 3
    packed, sb = _grads(model, batch, _cfg(preset, *extra, budget=budget), suppress, ref)
    assert s1["train/micro_batches"] == one.algo.mini_batches
    assert sb["train/micro_batches"] >= 2 * one.algo.mini_batches  # at least 2 per optimizer step
    assert len(whole) == len(packed) == one.algo.mini_batches
    for g1, gb in zip(whole, packed):
        norm = torch.sqrt(sum((a ** 2).sum() for a in g1))
        assert norm > 1e-3  # something to compare
        if dtype == torch.float32:
            for a, b in zip(g1, gb):
                torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
        else:  # bf16 weights: each micro-batch's gradient is rounded to bf16 before it is added
            diff = torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(g1, gb)))
            assert diff / norm < 2e-2
    assert sb["loss/policy"] == pytest.approx(s1["loss/policy"], rel=1e-2 if dtype == torch.bfloat16 else 1e-5)
    assert sb["actor/updated_seqs_frac"] == s1["actor/updated_seqs_frac"]


@pytest.mark.parametrize("prompt_once", [True, False])
def test_every_forward_computes_at_most_the_budget(tiny_dir, monkeypatch, prompt_once):
    """The tokens each micro-batch's forwards feed the model (input_ids numel, read by a hook:
    the joined rows, or under prompt_once the prompts' prefix and the rows' tails) equal the
    budget's count and stay within it, for the update and the reference's no-grad forwards."""
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    cfg = _cfg("reinforce_pp", f"train.prompt_once={str(prompt_once).lower()}")
    batch, suppress = _batch(model, processor, cfg)
    model.train()
    lengths = batch_lengths(model, batch, LogprobOptions.of(cfg, suppress))
    assert lengths.shared == prompt_once
    # a group under prompt_once: 47 + 4 x (1 + 8) = 83 tokens, two: 2 x 47 + 8 x 9 = 166; a joined row 48 + 8
    budget = 120 if prompt_once else 300
    cfg = _cfg("reinforce_pp", f"train.prompt_once={str(prompt_once).lower()}", budget=budget)
    fed: list[int] = []
    per_call: list[tuple[list[int], int]] = []
    ref = copy.deepcopy(model).eval()  # reinforce_pp's KL: a frozen copy, whose forwards are counted too
    hooks = [base_model(m).register_forward_pre_hook(lambda _m, _a, kw: fed.append(kw["input_ids"].numel()),
                                                     with_kwargs=True) for m in (model, ref)]
    real = learner_mod.rows_logprobs

    def counted(model_, batch_, rows, *a, **k):
        fed.clear()
        out = real(model_, batch_, rows, *a, **k)
        per_call.append((list(rows), sum(fed)))
        return out

    monkeypatch.setattr(learner_mod, "rows_logprobs", counted)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = Learner(cfg, model, opt, Accelerator(cpu=True), suppress, ref_model=ref).update(
        batch, advantages_for(batch, cfg), seed=0)
    for h in hooks:
        h.remove()
    passes = int(stats["train/micro_batches"])
    assert passes >= 3 and len(per_call) == 2 * passes  # the reference's forwards, then the update's
    for rows, tokens in per_call:
        assert tokens == forward_tokens(lengths, rows)[0], rows
        assert tokens <= budget, (rows, tokens)
    for part in (per_call[:passes], per_call[passes:]):  # each row once in each pass over the batch
        assert sorted(r for rows, _ in part for r in rows) == list(range(B * G))
    computed = sum(t for _, t in per_call[passes:])
    valid = sum(forward_tokens(lengths, rows)[1] for rows, _ in per_call[passes:])
    assert stats["train/padding_waste"] == pytest.approx(computed / valid) and computed > valid


def test_rows_grouped_by_length_pad_less_than_equal_shares(tiny_dir):
    """The same number of micro-batches: packed by length under a budget, the update computes
    fewer padding tokens than `algo.grad_accum`'s round-robin shares."""
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    cfg = _cfg("grpo", "train.prompt_once=false")
    batch, suppress = _batch(model, processor, cfg)
    _, packed = _grads(model, batch, _cfg("grpo", "train.prompt_once=false", budget=4 * 56), suppress)
    passes = int(packed["train/micro_batches"])
    assert passes == 3  # 12 joined rows of 48 + up to 8 tokens: 4 rows of the longest per forward
    _, shares = _grads(model, batch, _cfg("grpo", "train.prompt_once=false", f"algo.grad_accum={passes}"), suppress)
    assert shares["train/micro_batches"] == passes
    # by hand: longest first, rows (8, 8, 8, 7), (6, 5, 4, 3), (2, 2, 1, 1) -> 4 x 56 + 4 x 54 + 4 x 50
    # computed for 12 x 48 + 55 valid tokens; round-robin rows 0, 3, 6, 9 / 1, 4, 7, 10 / 2, 5, 8, 11
    # run to their longest, 8, 6 and 8 -> 4 x 56 + 4 x 54 + 4 x 56
    valid = 12 * 48 + sum(LENGTHS)
    assert packed["train/padding_waste"] == pytest.approx((4 * 56 + 4 * 54 + 4 * 50) / valid)
    assert shares["train/padding_waste"] == pytest.approx((4 * 56 + 4 * 54 + 4 * 56) / valid)


def test_no_grad_forwards_pad_to_the_rank_that_needs_most(tiny_dir, monkeypatch):
    """Under several processes a rank whose rows need fewer budget forwards than another's runs
    spare one-row forwards (results unread), so DDP's per-forward collectives stay in step; here
    the other rank is simulated to need 2 more. The log-probs are those without padding."""
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    cfg = _cfg("grpo", budget=120)
    batch, suppress = _batch(model, processor, cfg)
    model.train()
    alone = learner_mod.batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress))
    plan = learner_mod.forward_rows(model, batch, LogprobOptions.of(cfg, suppress))
    assert len(plan) == 3 and None not in plan  # one group (47 + 4 x 9 = 83 tokens) per forward
    calls: list = []
    real = learner_mod.rows_logprobs
    monkeypatch.setattr(learner_mod, "rows_logprobs", lambda m, b, rows, *a, **k: calls.append(list(rows)) or real(m, b, rows, *a, **k))
    from mmrlvr.train import forward_rows as rows_mod

    for mod in (learner_mod, rows_mod):  # the plan's padding (forward_rows) and the forwards' (learner)
        monkeypatch.setattr(mod, "rank_world", lambda: (0, 2))
        monkeypatch.setattr(mod, "all_max", lambda x: x + 2)
    padded = learner_mod.batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress))
    assert calls == [*plan, [3], [3]]  # the spare forwards take the shortest row (1 token)
    torch.testing.assert_close(padded, alone, rtol=0, atol=0)


def test_a_budget_with_grad_accum_is_one_line_naming_both():
    from mmrlvr.checks.validate import config_errors

    assert config_errors(load_config(None, ["train.micro_batch_tokens=4096", "algo.grad_accum=4"])) == [
        "algo.grad_accum=4: unset (or 1) with train.micro_batch_tokens: the token budget decides the micro-batches"]
    assert config_errors(load_config(None, ["train.micro_batch_tokens=4096", "algo.grad_accum=1"])) == []
    assert config_errors(load_config(None, ["train.micro_batch_tokens=0"])) == [
        "train.micro_batch_tokens=0: expected an integer >= 1 (or null: split by algo.grad_accum)"]


def test_a_row_above_the_budget_runs_alone_and_is_reported_once(tiny_dir, caplog):
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    cfg = _cfg("grpo", "train.prompt_once=false", budget=53)  # rows cost 48 + their longest completion
    batch, suppress = _batch(model, processor, cfg)
    model.train()
    with caplog.at_level("WARNING", logger="mmrlvr.train.forward_rows"):
        plan = learner_mod.forward_rows(model, batch, LogprobOptions.of(cfg, suppress))
        learner_mod.forward_rows(model, batch, LogprobOptions.of(cfg, suppress))
    # two rows cost at least 2 x (48 + 1): every row alone; those of 6-8 tokens (54-56) above the budget
    lengths = batch_lengths(model, batch, LogprobOptions.of(cfg, suppress))
    assert plan == [[r] for r in (0, 5, 11, 2, 7, 8, 9, 4, 1, 6, 3, 10)]  # longest first
    assert [forward_tokens(lengths, mb)[0] for mb in plan][:5] == [56, 56, 56, 55, 54]
    warned = [r.getMessage() for r in caplog.records if "micro_batch_tokens=53" in r.getMessage()]
    assert warned == ["train.micro_batch_tokens=53: a row of 56 tokens (prompt width 48 + completion) runs alone, "
                      "above the budget; raise the budget or lower rollout.max_new_tokens / model.max_pixels"]
