"""refine (ThinkTwice): alternate phases, one shared first answer refined G times, only the refining
turn trained, and the instruction taken from rollout.episode_args (the runner's own tests:
tests/rollout/test_episodes.py, whose two prompts and config these reuse)."""

from __future__ import annotations

import dataclasses

import torch

from mmrlvr.methods.refine.episode import REFINE_PROMPT, phase_of
from mmrlvr.recipe.step import Round, _rectangular_batch
from mmrlvr.rollout.episodes import role_reward_metrics, run_episodes
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.learner import LogprobOptions, batch_logprobs, loss_mask
from tests.rollout.test_episodes import _cfg, _prompts


def test_refine_phases_train_only_their_own_turn(tiny):
    """refine (as ThinkTwice's trainer): odd steps are one solve turn (all trained); even steps take
    one answer per prompt, shared by its G episodes, show ThinkTwice's review instruction after it
    (both context) and train only the refining turn; evaluation runs both turns."""
    assert [phase_of(s) for s in (1, 2, 3, 4)] == ["solve", "refine", "solve", "refine"]
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    cfg = _cfg("refine", max_turns=2, max_episode_tokens=400)
    g = 3
    solve = run_episodes(engine, _prompts(), g, cfg.rollout, seed=4, step=1)
    assert all(c.episode["roles"] == ["solver"] and c.policy_mask == [1] * len(c.token_ids) for c in solve.completions)
    assert len({tuple(c.token_ids) for c in solve.completions[:g]}) > 1  # G answers of their own
    refine = run_episodes(engine, _prompts(), g, cfg.rollout, seed=4, step=2)
    once = engine.rollout(_prompts(), 1, cfg.rollout, seed=4)  # the one answer per prompt the refine step shares
    tok = processor.tokenizer
    assert [c.sample_index for c in refine.completions] == [0, 0, 0, 1, 1, 1]
    for i, c in enumerate(refine.completions):
        first = once.completions[i // g].token_ids
        assert c.episode["roles"] == ["solver", "refiner"] and c.episode["ended_by"] == "max_turns"
        assert c.token_ids[: len(first)] == first  # every episode of a group refines the same answer
        n_ctx = c.policy_mask.index(1)
        assert n_ctx > len(first) and all(c.policy_mask[n_ctx:])  # the refine turn alone is trained
        assert REFINE_PROMPT.strip() in tok.decode(c.token_ids[:n_ctx]) and c.text == c.episode["texts"][1]
    assert len({tuple(c.token_ids) for c in refine.completions[:g]}) > 1  # G refinements of their own
    rnd = Round(_prompts(), refine, torch.zeros(2, g), [None] * 6, torch.ones(2, dtype=torch.bool), {}, 0)
    batch = _rectangular_batch(rnd)
    assert "_base" in batch.prompt_inputs  # no inserted images: each prompt's forward once still applies
    mask = loss_mask(batch, dataclasses.replace(cfg.algo, mask_truncated=False)).bool()
    lp = batch_logprobs(model, batch, LogprobOptions.of(cfg, engine.suppress_ids))
    torch.testing.assert_close(lp[mask], batch.sampler_logprobs[mask], atol=2e-5, rtol=0)
    rewards = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert role_reward_metrics(refine.completions, rewards) == {"reward/refiner/mean": 2 / 6}
    assert role_reward_metrics(solve.completions, rewards) == {"reward/solver/mean": 2 / 6}
    evaluated = run_episodes(engine, _prompts(), 1, cfg.rollout, seed=0, greedy=True)
    assert all(c.episode["turns"] == 2 for c in evaluated.completions)


def test_refine_takes_its_instruction_from_episode_args(tiny):
    """rollout.episode_args.instruction replaces ThinkTwice's, `{question}` filled with the prompt's question."""
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    cfg = _cfg("refine", max_turns=2, max_episode_tokens=160)
    cfg.rollout.episode_args = {"instruction": "Check it again. {question}"}
    out = run_episodes(engine, _prompts(), 2, cfg.rollout, seed=1, step=2)
    tok = processor.tokenizer
    for c in out.completions:
        question = _prompts()[c.sample_index].messages[0]["content"][1]["text"]
        shown = tok.decode(c.token_ids[: c.policy_mask.index(1)])
        assert f"Check it again. {question}" in shown and "carefully review" not in shown
