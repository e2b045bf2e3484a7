import copy

import pytest
import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.config import load_config
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import collect
from tests.train.step_helpers import run_update, with_algo
from mmrlvr.verifiers.score import InProcessScorer
from mmrlvr.tasks import load_task


def _batch(model, processor, cfg, algo):
    samples = load_task("counting", "train", 16, 0)
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(samples, 0), InProcessScorer(), with_algo(cfg, algo), seed=0)
    # a fixed, varied reward matrix so every group carries signal
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    # mixed completion lengths (an untrained policy fills every row): micro-batches then trim their
    # forward to their own longest row and pad back, and token counts differ per row
    t = batch.completion_mask.shape[1]
    lengths = torch.tensor([t, 2, t - 1, 1, 3, t, 2, t - 2])[: batch.completion_mask.shape[0]].clamp(1, t)
    batch.completion_mask = (torch.arange(t)[None] < lengths[:, None]).to(batch.completion_mask.dtype)
    return batch, engine.suppress_ids


def _apply(model, batch, cfg, algo, suppress):
    from accelerate import Accelerator

    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    stats = run_update(model, None, opt, Accelerator(cpu=True), batch, cfg, algo, suppress, seed=0)
    torch.set_num_threads(1)
    return [p.detach() - b for p, b in zip(model.parameters(), before)], stats


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_grad_accumulation_1x8_equals_8x1(fresh_tiny, aggregation):
    model, processor = fresh_tiny
    cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                             "train.max_grad_norm=1e9", f"algo.aggregation={aggregation}"])
    algo1 = resolve_algo(cfg.algo, 6)
    batch, suppress = _batch(model, processor, cfg, algo1)
    d1, s1 = _apply(model, batch, cfg, algo1, suppress)
    cfg.algo.grad_accum = 8
    algo8 = resolve_algo(cfg.algo, 6)
    d8, s8 = _apply(model, batch, cfg, algo8, suppress)
    assert s1["actor/updated_seqs_frac"] == 1.0
    assert max((a - b).abs().max().item() for a, b in zip(d1, d8)) < 1e-5
    assert max(a.abs().max().item() for a in d1) > 1e-4  # something moved
    assert s1["loss/policy"] == pytest.approx(s8["loss/policy"], abs=1e-6)


def test_zero_advantage_groups_are_skipped_without_changing_the_update(fresh_tiny):
    model, processor = fresh_tiny
    cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                             "train.max_grad_norm=1e9"])
    algo = resolve_algo(cfg.algo, 6)
    batch, suppress = _batch(model, processor, cfg, algo)
    batch.rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    d_skip, stats = _apply(model, batch, cfg, algo, suppress)
    assert stats["actor/updated_seqs_frac"] == 0.5
    # the same update with the second group forced through the forward (entropy_coef tiny but > 0
    # disables skipping) differs only by that negligible entropy term
    cfg.algo.entropy_coef = 1e-12
    d_all, stats_all = _apply(model, batch, cfg, resolve_algo(cfg.algo, 6), suppress)
    assert stats_all["actor/updated_seqs_frac"] == 1.0
    assert max((a - b).abs().max().item() for a, b in zip(d_skip, d_all)) < 1e-5


def test_dynamic_sampling_rounds_and_drops(fresh_tiny, tmp_path):
    """All-equal groups are dropped and sampled again, up to max_rounds; then topped up."""
    model, processor = fresh_tiny
    plugin = tmp_path / "v.py"
    plugin.write_text("def always(c, s):\n    return 1.0\n\ndef parity(c, s):\n    return float(len(c) % 2)\n")
    samples = load_task("counting", "train", 64, 0)
    engine = HFRolloutEngine(model, processor)
    base = ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
            "algo.algorithm=dapo", "algo.max_rounds=3"]
    cfg = load_config(None, base + [f"rewards=[{{verifier: {plugin}:always}}]"])
    batch = collect(engine, SeededStream(samples, 0), InProcessScorer(), with_algo(cfg, resolve_algo(cfg.algo, 6)), seed=0)
    # every group is uninformative: 3 rounds of 2 groups, all dropped; the batch is topped up
    assert batch.metrics["rollout/rounds"] == 3 and batch.metrics["rollout/dropped_groups"] == 6
    assert batch.rewards.shape == (2, 4) and batch.completion_ids.shape[0] == 8
    assert batch.prompt_inputs["input_ids"].shape[0] == 8
    cfg = load_config(None, base + [f"rewards=[{{verifier: {plugin}:parity}}]", "rollout.temperature=2.0"])
    batch = collect(engine, SeededStream(samples, 0), InProcessScorer(), with_algo(cfg, resolve_algo(cfg.algo, 6)), seed=0)
    # random parities: every group kept for the update has mixed rewards, found within the rounds
    assert all(len(set(row.tolist())) > 1 for row in batch.rewards)
    rounds, dropped = batch.metrics["rollout/rounds"], batch.metrics["rollout/dropped_groups"]
    assert 1 <= rounds <= 3 and dropped <= 2 * rounds - 2


def test_prompt_stream_resumes_at_its_position_and_reshuffles_each_pass():
    full = SeededStream(list(range(10)), seed=0).take(25)
    assert SeededStream(list(range(10)), seed=0, pos=13).take(12) == full[13:]
    assert sorted(full[:10]) == list(range(10)) and sorted(full[10:20]) == list(range(10))
    assert full[:10] != full[10:20]  # a new order every pass


def test_token_mean_divides_by_valid_tokens_only(fresh_tiny):
    """On-policy (ratio 1) the PPO loss is -sum_i A_i * L_i / sum_i L_i for token-mean, where L_i
    counts row i's valid tokens: padding must not enter the denominator.

    Rows 0 and 5 are cut to 2 and 3 tokens, so padding is a large share of the (8, 6) grid and a
    denominator of mask.numel() = 48 would give a clearly different loss."""
    from mmrlvr.algos.advantages import estimate

    model, processor = fresh_tiny
    cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                             "train.max_grad_norm=1e9", "algo.aggregation=token-mean"])
    algo = resolve_algo(cfg.algo, 6)
    batch, suppress = _batch(model, processor, cfg, algo)
    batch.completion_mask[0, 2:] = 0
    batch.completion_mask[5, 3:] = 0
    lengths = batch.completion_mask.sum(1).float()
    assert lengths.sum() < batch.completion_mask.numel()  # there is padding to get wrong
    adv = estimate(algo.advantage, batch.rewards).reshape(-1)
    expected = -(adv * lengths).sum() / lengths.sum()
    _, stats = _apply(model, batch, cfg, algo, suppress)
    assert stats["loss/policy"] == pytest.approx(expected.item(), abs=1e-5)


def test_overlong_penalty_lowers_the_reward_of_long_completions():
    """DAPO's soft overlong punishment enters the step's rewards with its sign (<= 0)."""
    from types import SimpleNamespace

    from mmrlvr.train.learner import loss_mask
    from mmrlvr.recipe.step import advantages_for

    cfg = load_config(None, ["rollout.max_new_tokens=8", "algo.advantage=dr_grpo", "algo.overlong_buffer=4",
                             "algo.overlong_factor=1.0"])
    algo = resolve_algo(cfg.algo, 8)
    lengths = torch.tensor([2, 5, 6, 8])
    batch = SimpleNamespace(rewards=torch.tensor([[1.0, 1.0, 0.0, 0.0]]), truncated=torch.zeros(4, dtype=torch.bool),
                            completion_mask=(torch.arange(8)[None] < lengths[:, None]).float(), group_sizes=None, policy_mask=None,
                            sample_ids=["p"], bonus=None)  # what advantages_for reads of a RolloutBatch
    adv = advantages_for(batch, with_algo(cfg, algo))
    # penalty starts at 8 - 4 = 4 tokens: lengths 2, 5, 6, 8 -> 0, -1/4, -2/4, -1
    # shaped rewards [1, 0.75, -0.5, -1], mean 0.0625 -> dr_grpo advantages r - mean
    want = torch.tensor([1.0, 0.75, -0.5, -1.0]) - 0.0625
    assert torch.allclose(adv.flatten(), want)
    assert torch.equal(loss_mask(batch, algo), batch.completion_mask)


@pytest.mark.parametrize("grad_accum", [1, 3])
def test_recomputed_mlps_change_no_weight_and_follow_the_setting(fresh_tiny, monkeypatch, grad_accum):
    """`train.recompute_mlp` reaches the learner's forward (each MLP's forward runs the recomputing
    function when on, never when off), and the update's weight deltas are bit-identical."""
    from mmrlvr.models.patches import gated_mlp

    model, processor = fresh_tiny
    calls = []
    real = gated_mlp._GatedDown.apply
    monkeypatch.setattr(gated_mlp._GatedDown, "apply", lambda *a: (calls.append(1), real(*a))[1])
    deltas = {}
    for on in (False, True):
        cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                                 f"algo.grad_accum={grad_accum}", "algo.entropy_coef=0.01",
                                 f"train.recompute_mlp={str(on).lower()}"])
        algo = resolve_algo(cfg.algo, 6)
        batch, suppress = _batch(model, processor, cfg, algo)
        calls.clear()
        deltas[on], _ = _apply(model, batch, cfg, algo, suppress)
        layers = model.config.get_text_config().num_hidden_layers
        # every MLP once per forward: prompt prefix and completions, or the joined rows, per micro-batch
        assert (len(calls) >= layers * grad_accum and len(calls) % layers == 0) if on else not calls
    assert all(torch.equal(a, b) for a, b in zip(deltas[False], deltas[True]))
    assert max(a.abs().max().item() for a in deltas[True]) > 1e-4


@pytest.mark.parametrize("grad_accum", [1, 3])
def test_one_attention_mask_per_forward_changes_no_weight_and_follows_the_setting(fresh_tiny, monkeypatch, grad_accum):
    """`train.mask_once` reaches the learner's forward (each boolean mask is made additive once per
    forward when on, never when off), and the update's weight deltas are bit-identical."""
    from mmrlvr.models.patches import attention_mask

    model, processor = fresh_tiny
    made = []
    real = attention_mask.additive_mask
    monkeypatch.setattr(attention_mask, "additive_mask", lambda m, d: (made.append(tuple(m.shape)), real(m, d))[1])
    deltas = {}
    for on in (False, True):
        cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                                 f"algo.grad_accum={grad_accum}", "algo.entropy_coef=0.01",
                                 f"train.mask_once={str(on).lower()}"])
        algo = resolve_algo(cfg.algo, 6)
        batch, suppress = _batch(model, processor, cfg, algo)
        made.clear()
        deltas[on], _ = _apply(model, batch, cfg, algo, suppress)
        # completions of different lengths pad: at least one mask per micro-batch, one per forward at most
        assert (grad_accum <= len(made) <= 2 * grad_accum) if on else not made
    assert all(torch.equal(a, b) for a, b in zip(deltas[False], deltas[True]))
    assert max(a.abs().max().item() for a in deltas[True]) > 1e-4


def test_the_norm_setting_reaches_the_learners_forward(fresh_tiny, monkeypatch):
    """`train.recompute_norm` reaches the learner's forward (the swap itself acts in bf16 only and
    is tested in every family by tests/models/test_family_rms_norm.py)."""
    from mmrlvr.train import logprobs

    model, processor = fresh_tiny
    seen = []
    real = logprobs.recomputed_rms_norms
    monkeypatch.setattr(logprobs, "recomputed_rms_norms", lambda m, on: (seen.append(on), real(m, on))[1])
    for on in (False, True):
        cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
                                 f"train.recompute_norm={str(on).lower()}"])
        algo = resolve_algo(cfg.algo, 6)
        batch, suppress = _batch(model, processor, cfg, algo)
        seen.clear()
        _apply(model, batch, cfg, algo, suppress)
        assert seen and set(seen) == {on}
