"""PRCO's step on the tiny model: G Observer captions per prompt (one group), K Solver answers per
caption (a group each, the caption in the Solver's prompt), the Observer rewarded by its answers'
mean, a leaking caption gated, each role trained on its own turn only."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.data.sources import SeededStream
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.train.learner import LogprobOptions, batch_logprobs, loss_mask
from mmrlvr.recipe.step import advantages_for, collect
from mmrlvr.verifiers.score import InProcessScorer

B, G, K = 2, 3, 2


def _cfg(*extra):
    return resolve_config(load_config("configs/prco_tiny.yaml", [
        "verifier_workers=0", "rollout.max_new_tokens=6", f"rollout.prompts_per_step={B}", f"rollout.group_size={G}",
        f"rollout.episode_args.solver_answers={K}", "rollout.episode_args.leak_gate=none", *extra]))


def _collect(tiny, cfg, step=1):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    stream = SeededStream(load_task("counting", "train", 8, 0), 0)
    return engine, collect(engine, stream, InProcessScorer(), cfg, seed=3, step=step)


def _prompt_text(batch, processor, row):
    ids = batch.prompt_inputs["input_ids"][row][batch.prompt_inputs["attention_mask"][row].bool()]
    return processor.tokenizer.decode(ids)


LENGTH_THIRDS = f"rewards=[{{verifier: {Path(__file__).parents[2] / 'e2e' / 'user_verifier.py'}:length_thirds, weight: 1.0}}]"


def test_captions_then_answers_two_group_structures_and_utility(tiny):
    model, processor = tiny
    cfg = _cfg(LENGTH_THIRDS)  # 0, 0.5 or 1 from any text: rewards that differ from row to row
    engine, batch = _collect(tiny, cfg)
    c = B * G  # captions
    assert batch.group_sizes == [G] * B + [K] * c and batch.completion_ids.shape[0] == c + c * K
    for j in range(c):  # the Observer's prompt; each Solver row's prompt holds its own caption
        assert "Describe the red shapes." in _prompt_text(batch, processor, j)
        caption = batch.texts[j].strip()
        for i in range(K):
            shown = _prompt_text(batch, processor, c + j * K + i)
            assert f"Caption: {caption} How many red shapes" in shown and "Describe" not in shown
    solver = batch.rewards[B:, :K]  # (C, K): caption j's answers
    assert len(set(solver.reshape(-1).tolist())) > 1
    assert torch.allclose(batch.rewards[:B].reshape(-1), solver.mean(dim=1))  # the utility: their mean
    m = batch.metrics
    assert m["reward/observer/mean"] == pytest.approx(solver.mean().item())
    assert m["reward/solver/mean"] == pytest.approx(solver.mean().item()) and m["reward/observer/leak_frac"] == 0.0
    assert "reward/solver/length_thirds" in m and "reward/observer/as_answer/length_thirds" in m
    assert "reward/length_thirds" not in m
    # each role is trained on its whole turn and nothing else: the caption inside a Solver prompt is context
    mask = loss_mask(batch, dataclasses.replace(cfg.algo, mask_truncated=False))
    assert torch.equal(mask, batch.completion_mask.float())
    lp = batch_logprobs(model, batch, LogprobOptions.of(cfg, engine.suppress_ids))  # the re-encoded prompts are the sampled ones
    torch.testing.assert_close(lp[mask.bool()], batch.sampler_logprobs[mask.bool()], atol=2e-5, rtol=0)


def test_advantages_by_hand_per_prompt_for_captions_per_caption_for_answers(tiny):
    _, batch = _collect(tiny, _cfg())
    # captions of prompt 0: utilities 1, 0.5, 0 -> (r - 0.5) / std 0.5 = +1, 0, -1; prompt 1 flat -> 0
    # caption 0's answers 1, 0 -> +-0.7071 (std 0.7071); caption 1's 1, 1 -> flat, 0
    assert torch.isnan(batch.rewards[B:, K:]).all()  # (B + C, G): the answer groups padded with NaN
    batch.rewards[:, :K] = 0.0
    batch.rewards[:B] = 0.0
    batch.rewards[0, :G] = torch.tensor([1.0, 0.5, 0.0])
    batch.rewards[1, :G] = 0.5
    batch.rewards[B, :K] = torch.tensor([1.0, 0.0])
    batch.rewards[B + 1, :K] = 1.0
    adv = advantages_for(batch, _cfg())[:, 0]
    c = B * G
    assert adv[:G].tolist() == pytest.approx([1.0, 0.0, -1.0], abs=1e-5)
    assert adv[G:c].tolist() == [0.0] * G
    assert adv[c: c + 2 * K].tolist() == pytest.approx([0.70711, -0.70711, 0.0, 0.0], abs=1e-5)


def test_a_leaking_caption_gets_the_leak_reward_and_its_answers_are_not_trained(tiny, monkeypatch):
    import mmrlvr.methods.prco.solve as prco

    real = prco.leaked

    def first_leaks(captions, golds, scores, gate):
        out = real(captions, golds, scores, gate)
        out[0] = True
        return out

    monkeypatch.setattr(prco, "leaked", first_leaks)
    _, batch = _collect(tiny, _cfg("rollout.episode_args.leak_reward=-0.2"))
    assert batch.rewards[0, 0].item() == pytest.approx(-0.2)
    assert torch.isnan(batch.rewards[B, :K]).all() and not torch.isnan(batch.rewards[B + 1, :K]).any()
    adv = advantages_for(batch, _cfg())[:, 0]
    assert adv[B * G: B * G + K].tolist() == [0.0, 0.0]  # unscorable: no gradient
    assert batch.metrics["reward/observer/leak_frac"] == pytest.approx(1 / (B * G))


def test_the_solver_sees_the_image_from_solver_image_after_on(tiny):
    _, before = _collect(tiny, _cfg("rollout.episode_args.solver_image_after=3"), step=2)
    _, after = _collect(tiny, _cfg("rollout.episode_args.solver_image_after=3"), step=3)
    c = B * G
    assert before.prompt_inputs["_n_images"][:c] == [1] * c and before.prompt_inputs["_n_images"][c:] == [0] * (c * K)
    assert after.prompt_inputs["_n_images"] == [1] * (c + c * K)
