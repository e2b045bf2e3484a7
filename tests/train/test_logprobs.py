"""Chunked log-probs/entropy equal the plain full-vocabulary computation; no-grad forwards are
micro-batched like the training forward and skip the entropy."""

import copy
import dataclasses

import pytest

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.train import logprobs as lpmod
from mmrlvr.train.logprobs import logits_to_logprobs


def _reference(logits, targets, temperature, suppress):
    x = logits.float() / temperature
    x[..., suppress] = -float("inf")
    logp_all = torch.log_softmax(x, -1)
    p = logp_all.exp()
    ent = -(p * torch.where(p > 0, logp_all, torch.zeros_like(logp_all))).sum(-1)
    return logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1), ent


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.integers(3, 12), st.sampled_from([1.0, 0.7, 1.3]),
       st.integers(1, 200), st.integers(0, 10_000))
def test_chunked_equals_full_vocabulary_softmax(n, t, v, temperature, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, t, v, generator=g) * 3).requires_grad_(True)
    suppress = [0, v - 1]
    targets = torch.randint(1, v - 1, (n, t), generator=g)
    lp, ent = logits_to_logprobs(logits, targets, temperature, suppress, with_entropy=True, chunk_elements=chunk)
    ref_lp, ref_ent = _reference(logits, targets, temperature, suppress)
    assert torch.allclose(lp, ref_lp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    w = torch.randn(n, t, generator=g)
    (grad,) = torch.autograd.grad((lp * w).sum() + (ent * w).sum(), logits)
    (ref_grad,) = torch.autograd.grad((ref_lp * w).sum() + (ref_ent * w).sum(), logits)
    assert torch.isfinite(grad).all() and torch.allclose(grad, ref_grad, atol=1e-5)


def test_bf16_logits_are_upcast_per_chunk():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 50, generator=g).bfloat16()
    targets = torch.randint(0, 50, (2, 3), generator=g)
    lp, _ = logits_to_logprobs(logits, targets, chunk_elements=60)
    assert lp.dtype == torch.float32
    assert torch.allclose(lp, _reference(logits, targets, 1.0, [])[0], atol=1e-6)


def test_entropy_metric_has_no_graph():
    logits = torch.randn(2, 3, 7, requires_grad=True)
    lp, ent = logits_to_logprobs(logits, torch.zeros(2, 3, dtype=torch.long), with_entropy=True, entropy_grad=False)
    assert lp.requires_grad and not ent.requires_grad


def _batch(fresh_tiny, extra=()):
    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import collect
    from tests.train.step_helpers import run_update, with_algo
    from mmrlvr.verifiers.score import InProcessScorer
    from mmrlvr.tasks import load_task

    model, processor = fresh_tiny
    cfg = load_config(None, ["rollout.prompts_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=8",
                             "rollout.temperature=1.3", *extra])
    algo = resolve_algo(cfg.algo, 8)
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(), with_algo(cfg, algo), seed=0)
    return model, batch, cfg, algo, engine.suppress_ids


def _record_rows(model):
    """Rows of every forward that computes completion logits. With each prompt's forward once
    (`train.prompt_once`) a micro-batch's distinct prompts run first into an empty cache: that
    forward is not counted here; `_prompt_rows` checks it stays within the micro-batch."""
    rows = []

    def hook(mod, args, kw):
        cache = kw.get("cache")
        if cache is None or cache.get_seq_length() > 0:
            rows.append(kw["input_ids"].shape[0])
        else:
            _prompt_rows.append(kw["input_ids"].shape[0])

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    return rows, handle


_prompt_rows: list[int] = []


def test_no_grad_forwards_are_micro_batched_and_exact(fresh_tiny, monkeypatch):
    from mmrlvr.train.learner import LogprobOptions, batch_logprobs

    model, batch, cfg, _, suppress = _batch(fresh_tiny)
    full = batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress))
    calls = []
    monkeypatch.setattr(lpmod, "_entropy", lambda *a: calls.append(1))  # nothing may compute it here
    rows, handle = _record_rows(model)
    for micro in (1, 5):
        rows.clear()
        _prompt_rows.clear()
        part = batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress), micro)
        assert rows == [micro] * (12 // micro) + ([12 % micro] if 12 % micro else [])
        # 3 prompts x 4 rows: micro 5 = rows 0-4 (prompts 0, 1), 5-9 (1, 2), 10-11 (2 only);
        # micro 1 repeats no prompt, so every row takes the one joined forward
        assert _prompt_rows == ([2, 2, 1] if micro == 5 else [])
        m = batch.completion_mask.bool()
        assert torch.allclose(part[m], full[m], atol=1e-5) and (part[~m] == 0).all()
    handle.remove()
    assert not calls


def test_update_runs_old_and_reference_forwards_in_training_micro_batches(fresh_tiny):
    """reinforce_pp (KL to a frozen reference) with 2 mini-batches x 2 micro-batches over 12 rows:
    every forward, the no-grad old/reference ones included, sees at most ceil(12 / 4) = 3 rows."""
    from accelerate import Accelerator

    from mmrlvr.checks.resolve import resolve_algo
    from tests.train.step_helpers import run_update

    model, batch, cfg, _, suppress = _batch(fresh_tiny, ["algo.algorithm=reinforce_pp", "algo.mini_batches=2",
                                                         "algo.grad_accum=2"])
    algo = resolve_algo(cfg.algo, 8)
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    sampled = batch.sampler_logprobs
    assert sampled is not None  # the HF engine always returns them
    for sampler_lp, learner_rows in ((None, 24), (sampled, 12)):
        batch.sampler_logprobs = sampler_lp
        rows, handle = _record_rows(model)
        ref_rows, ref_handle = _record_rows(ref)
        run_update(model, ref, torch.optim.SGD(model.parameters(), lr=0.1), Accelerator(cpu=True), batch, cfg, algo,
                   suppress, seed=0)
        torch.set_num_threads(1)
        handle.remove()
        ref_handle.remove()
        assert ref_rows == [3, 3, 3, 3]
        # without the sampler's log-probs: the learner's old log-probs (no grad, 12 rows), then the 4
        # training micro-batches; with them (HF engine: the sampler is the learner) pi_old is read from
        # the batch and that forward is saved
        assert max(rows) == 3 and sum(rows) == learner_rows


def test_step_logprobs_use_the_rollout_temperature(fresh_tiny):
    """The step's own log-prob path (what the ratio and KL use) must apply the sampler's
    temperature: at 1.3 its log-probs equal the sampler's processed scores, not the raw ones."""
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.train.learner import LogprobOptions, batch_logprobs
    from mmrlvr.tasks import load_task

    model, batch, cfg, _, suppress = _batch(fresh_tiny)
    engine = HFRolloutEngine(model, fresh_tiny[1])
    out = engine.rollout(load_task("counting", "train", 3, 0), 4, cfg.rollout, seed=1, return_logprobs=True)
    batch.prompt_inputs = repeat_prompts(out.prompt_inputs, 4)
    batch.completion_ids, batch.completion_mask = out.completion_ids, out.completion_mask
    lp = batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress))
    m = out.completion_mask.bool()
    assert (lp - out.sampler_logprobs)[m].abs().max().item() < 1e-4


def test_logprob_options_read_each_setting_from_its_own_key():
    """The record the learner's forwards read instead of the config: every field from its own key
    (values no default shares, so a swapped or dropped field shows)."""
    from mmrlvr.config import load_config
    from mmrlvr.models.patches.options import ForwardOptions
    from mmrlvr.train.learner import LogprobOptions

    cfg = load_config("configs/quickstart.yaml", ["rollout.temperature=0.7", "train.micro_batch_tokens=96",
                                                  "train.prompt_once=true", "train.chunked_head=false",
                                                  "train.recompute_mlp=true", "train.mask_once=false",
                                                  "train.recompute_norm=true"])
    opts = LogprobOptions.of(cfg, [9, 4])
    assert opts == LogprobOptions(0.7, (9, 4), ForwardOptions(True, False, True, False, True), 96)
    assert LogprobOptions.of(cfg).suppress_ids == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.temperature = 1.0  # handed to every forward: nobody changes it on the way


def test_mixed_lengths_are_trimmed_and_padded_back_in_place(fresh_tiny):
    """Rows shorter than the batch run a forward cut at their longest completion and are padded
    back to T on the right: the result equals the untrimmed forward at every valid position."""
    from mmrlvr.train.learner import LogprobOptions, batch_logprobs, rows_logprobs

    model, batch, cfg, _, suppress = _batch(fresh_tiny)
    lengths = torch.tensor([8, 3, 5, 1, 6, 2, 8, 4, 7, 3, 2, 5])
    batch.completion_mask = (torch.arange(8)[None] < lengths[:, None]).long()
    m = batch.completion_mask.bool()
    full = batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress))  # longest row has 8 tokens: no trim
    per_row = batch_logprobs(model, batch, LogprobOptions.of(cfg, suppress), 1)  # each row trimmed to its own length
    assert per_row.shape == full.shape == (12, 8)
    assert torch.allclose(per_row[m], full[m], atol=1e-5) and (per_row[~m] == 0).all()
    # the update's own path, with entropy: rows 1 and 3 (3 and 1 tokens) run a 3-token forward
    lp, ent = rows_logprobs(model, batch, [1, 3], LogprobOptions.of(cfg, suppress), with_entropy=True, entropy_grad=False)
    lp_all, ent_all = rows_logprobs(model, batch, [0, 1, 3], LogprobOptions.of(cfg, suppress), with_entropy=True, entropy_grad=False)
    assert lp.shape == ent.shape == (2, 8)
    sub = m[[1, 3]]
    assert torch.allclose(lp[sub], lp_all[1:][sub], atol=1e-5) and torch.allclose(ent[sub], ent_all[1:][sub], atol=1e-5)
    assert (ent[:, 3:] == 0).all() and (lp[:, 3:] == 0).all()


def _grad_nodes(root) -> list[str]:
    """Names of every autograd node reachable from `root`."""
    seen, stack, names = set(), [root], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack += [nxt for nxt, _ in node.next_functions]
    return names


def test_blocks_backward_through_one_split_not_a_full_size_slice_each():
    # 3 rows x 4 tokens x 10 ids with chunk 10: one token per block, 12 blocks. A sliced block's
    # backward would allocate a zero (3, 4, 10) gradient per block (12 SliceBackward nodes);
    # split's backward concatenates once (1 row split + 3 token splits).
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 4, 10, generator=g, requires_grad=True)
    targets = torch.randint(0, 10, (3, 4), generator=g)
    lp, _ = logits_to_logprobs(logits, targets, 1.3, [2], chunk_elements=10)
    names = _grad_nodes(lp.grad_fn)
    assert names.count("SliceBackward0") == 0
    assert names.count("SplitBackward0") + names.count("SplitWithSizesBackward0") == 4
    # the same numbers, bit for bit, as slicing each block out of the logits
    ref = torch.stack([torch.stack([
        (lambda x: x.gather(-1, targets[i, j].view(1)) - torch.logsumexp(x, -1))(
            (logits[i, j] / 1.3).index_fill(-1, torch.tensor([2]), float("-inf")))[0]
        for j in range(4)]) for i in range(3)])
    w = torch.randn(3, 4, generator=g)
    (grad,) = torch.autograd.grad((lp * w).sum(), logits)
    (ref_grad,) = torch.autograd.grad((ref * w).sum(), logits)
    assert torch.equal(lp, ref) and torch.equal(grad, ref_grad)
