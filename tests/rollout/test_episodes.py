"""Episodes of several turns: the loss mask keeps only the policy's tokens, the learner's log-probs
of those tokens are the sampler's with an image inserted mid-episode, a turn function that fails
ends only its episode, and `single` is exactly the one-turn rollout."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch
from PIL import Image

from mmrlvr.config import Config
from mmrlvr.rollout.episodes import (
    Turn, call_turn, EpisodeState, episode_metrics, policy_mask_of, register_episode, role_reward_metrics, run_episodes,
)
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.data.zoom import zoom
from mmrlvr.train.learner import LogprobOptions, batch_logprobs, loss_mask
from mmrlvr.recipe.step import Round, _rectangular_batch
from mmrlvr.types import Completion, RolloutBatch, Sample


def test_three_turn_loss_mask_by_hand():
    """Turn 1 (3 tokens), a tool result (2), turn 2 (2), a prompt (1), turn 3 (2): 10 tokens, 7 the
    policy's. A one-turn row beside it keeps its own mask; mask_truncated drops the truncated episode."""
    ep = Completion(0, "x", [5, 6, 7, 90, 91, 8, 9, 92, 10, 11], truncated=False,
                    policy_mask=[1, 1, 1, 0, 0, 1, 1, 0, 1, 1])
    cut = Completion(0, "y", [5, 6, 93, 94, 12, 13, 14], truncated=True, policy_mask=[1, 1, 0, 0, 1, 1, 1])
    one = Completion(1, "z", [4, 4, 4], truncated=False)
    comps = [ep, cut, one]
    mask = torch.tensor([[1] * 10, [1] * 7 + [0] * 3, [1] * 3 + [0] * 7])
    pm = policy_mask_of(comps, mask.shape)
    batch = RolloutBatch([], {}, torch.zeros(3, 10, dtype=torch.long), mask, torch.tensor([False, True, False]),
                         torch.zeros(1, 3), ["x", "y", "z"], [None] * 3, {}, policy_mask=pm)
    want = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0, 1, 1],
                         [1, 1, 0, 0, 1, 1, 1, 0, 0, 0],
                         [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float32)
    algo = Config().algo
    assert torch.equal(loss_mask(batch, dataclasses.replace(algo, mask_truncated=False)), want)
    want[1] = 0
    assert torch.equal(loss_mask(batch, dataclasses.replace(algo, mask_truncated=True)), want)
    assert policy_mask_of([one], (1, 3)) is None  # one-turn rows: no policy mask at all


@register_episode("test_zoom_then_ask", first_role="looker")
def _zoom_then_ask(state: EpisodeState) -> Turn:
    """Sample "a": an enlarged crop after turn 1, then a text prompt; sample "b": a text prompt only."""
    if len(state.turns) == 1 and state.sample.id == "a":
        crop = zoom(state.sample.images[0], (0, 0, 56, 28), state.max_pixels)
        return Turn({"role": "user", "content": [{"type": "text", "text": "Zoomed:"}, {"type": "image"}]},
                    images=(crop,), role="answerer")
    if len(state.turns) <= 2:
        return Turn({"role": "user", "content": "Answer now."}, role="answerer")
    return Turn(end=True, reason="answered")


def _prompts():
    red = Image.new("RGB", (112, 112), (235, 235, 235))
    red.paste((220, 40, 40), (10, 10, 40, 30))
    blue = Image.new("RGB", (140, 84), (40, 80, 220))
    return [
        Sample("a", ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many red shapes?"}]},),
               1, images=(red,)),
        Sample("b", ({"role": "user", "content": [{"type": "image"}, {"type": "text",
                      "text": "How many blue shapes, green shapes and circles are there?"}]},), 2, images=(blue,)),
    ]


def _cfg(episode: str, **rollout) -> Config:
    cfg = Config()
    cfg.rollout = dataclasses.replace(cfg.rollout, **{"episode": episode, "max_new_tokens": 5, "max_turns": 3,
                                                      "max_episode_tokens": 120, **rollout})
    return cfg


@pytest.mark.parametrize("sampler", ["inverse_cdf", "multinomial"])
def test_learner_logprobs_equal_sampler_with_image_inserted(tiny, sampler):
    """The learner's teacher-forced forward of whole episodes (prompt image + an inserted crop, rows
    of different lengths and image counts) gives the sampler's log-probs on every policy token."""
    model, processor = tiny
    cfg = _cfg("test_zoom_then_ask", sampler=sampler, temperature=0.7)
    engine = HFRolloutEngine(model, processor)
    prompts = _prompts()
    out = run_episodes(engine, prompts, 2, cfg.rollout, seed=11)
    eps = [c.episode for c in out.completions]
    assert [e["inserted_images"] for e in eps] == [1, 1, 0, 0]
    assert all(e["turns"] == 3 and e["roles"] == ["looker", "answerer", "answerer"] for e in eps)
    lengths = {len(c.token_ids) for c in out.completions}
    assert len(lengths) >= 2  # rows "a" carry the crop's 16 placeholders, rows "b" do not
    rnd = Round(prompts, out, torch.zeros(2, 2), [None] * 4, torch.ones(2, dtype=torch.bool), {}, 0)
    batch = _rectangular_batch(rnd)
    assert batch.prompt_inputs["_n_images"] == [2, 2, 1, 1]
    mask = loss_mask(batch, dataclasses.replace(cfg.algo, mask_truncated=False))
    assert int(mask.sum()) == sum(sum(c.policy_mask) for c in out.completions)
    assert all(len(c.policy_mask) - sum(c.policy_mask) >= 2 for c in out.completions)  # inserted context
    lp = batch_logprobs(model, batch, LogprobOptions.of(cfg, engine.suppress_ids))
    s = batch.sampler_logprobs
    assert torch.equal(lp[mask == 0], torch.zeros_like(lp[mask == 0]))
    assert torch.equal(s[mask == 0], torch.zeros_like(s[mask == 0]))
    torch.testing.assert_close(lp[mask.bool()], s[mask.bool()], atol=2e-5, rtol=0)
    # the crop is seen: other pixels in its place move the later turns' log-probs of rows "a" only
    for c in out.completions[:2]:
        c.media = {**c.media, "pixel_values": torch.zeros_like(c.media["pixel_values"])}
    moved = (batch_logprobs(model, _rectangular_batch(rnd), LogprobOptions.of(cfg, engine.suppress_ids)) - lp).abs()
    first = [c.policy_mask.index(0) for c in out.completions[:2]]  # turn 1 comes before the crop
    assert all(moved[i, first[i]:].max() > 1e-4 and moved[i, :first[i]].max() < 1e-5 for i in range(2))
    assert moved[2:].max() < 1e-5
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert role_reward_metrics(out.completions, rewards) == {"reward/answerer/mean": 0.75}


@register_episode("test_raises")
def _raises(state: EpisodeState) -> Turn:
    if state.sample.id == "a":
        raise RuntimeError("tool crashed")
    return Turn(end=True, reason="answered")


@register_episode("test_slow")
def _slow(state: EpisodeState) -> Turn:
    time.sleep(2.0)
    return Turn({"role": "user", "content": "late"})


def test_failing_turn_functions_end_only_their_episode(tiny):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    out = run_episodes(engine, _prompts(), 2, _cfg("test_raises").rollout, seed=1)
    assert [c.episode["ended_by"] for c in out.completions] == ["error", "error", "answered", "answered"]
    m = episode_metrics(out.completions)
    assert m["episode/ended_by_error_frac"] == 0.5 and m["episode/turns_mean"] == 1.0
    assert all(c.policy_mask == [1] * len(c.token_ids) for c in out.completions)
    turn = call_turn(_slow, EpisodeState(_prompts()[0], ["x"]), timeout_s=0.2)
    assert (turn.end, turn.reason) == (True, "timeout")


def test_single_is_the_one_turn_rollout(tiny):
    """`single` returns the engine's own rollout: same tokens, mask and sampler log-probs, no policy mask."""
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    cfg = _cfg("single")
    a = run_episodes(engine, _prompts(), 3, cfg.rollout, seed=5)
    b = engine.rollout(_prompts(), 3, cfg.rollout, seed=5)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.sampler_logprobs, b.sampler_logprobs)
    assert all(c.policy_mask is None and c.episode is None for c in a.completions)
    rnd = Round(_prompts(), a, torch.zeros(2, 3), [None] * 6, torch.ones(2, dtype=torch.bool), {}, 0)
    assert _rectangular_batch(rnd).policy_mask is None


@pytest.mark.parametrize("override,expected", [
    ("rollout.episode=agentic", "rollout.episode='agentic': expected a registered episode: "),
    ("rollout.engine=vllm_server", "rollout.engine='vllm_server': expected hf or vllm with rollout.episode=tools"),
    ("rollout.max_episode_tokens=16", "rollout.max_episode_tokens=16: expected at least rollout.max_new_tokens=32"),
    ("rollout.max_turns=0", "rollout.max_turns=0: expected an integer >= 1"),
    ("rollout.max_episode_images=-1", "rollout.max_episode_images=-1: expected an integer >= 0"),
    ("rollout.turn_timeout_s=0", "rollout.turn_timeout_s=0.0: expected a finite number of seconds > 0"),
])
def test_episode_limits_are_validated_up_front(override, expected, tmp_path, monkeypatch):
    import importlib.util

    from mmrlvr.config import load_config
    from mmrlvr.checks.validate import config_errors

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    errors = config_errors(load_config("configs/zoom_tools_tiny.yaml", [f"output_dir={tmp_path}", override]))
    assert any(expected in e for e in errors), errors
    assert config_errors(load_config("configs/zoom_tools_tiny.yaml", [f"output_dir={tmp_path}"])) == []
    # token weighting and the overlong penalty run on episodes (tests/train/test_episode_shaping.py), and so does vLLM
    shaped = ["token_weighting.method=vppo", "algo.algorithm=dapo", "rollout.engine=vllm"]
    assert config_errors(load_config("configs/zoom_tools_tiny.yaml", [f"output_dir={tmp_path}", *shaped])) == []
