"""What the vLLM engine hands vLLM, checked without vLLM: seeds, vocabulary, limits, media."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mmrlvr.data.feed import DecodedVideo
from mmrlvr.data.media import ShuffledVideo, VideoRef, decode_video
from mmrlvr.rollout.vllm_inputs import (
    allowed_token_ids, child_seeds, model_vocab_size, processor_kwargs, request_seeds, resolve_max_model_len,
    vllm_request, vllm_videos,
)
from mmrlvr.types import Sample


def test_request_seeds_spaced_by_group_size():
    # seed 2, 3 prompts, G=4: 2*100003 = 200006, then + 0, 4, 8
    assert request_seeds(2, 3, 4) == [200006, 200010, 200014]
    # vLLM samples child j with request seed + j: 200006..200017, twelve different streams
    assert child_seeds(request_seeds(2, 3, 4), 4) == list(range(200006, 200018))


@given(st.integers(0, 10_000), st.integers(1, 64), st.integers(1, 16))
def test_every_sample_of_two_consecutive_steps_has_its_own_seed(seed, b, g):
    a = child_seeds(request_seeds(seed, b, g), g)
    nxt = child_seeds(request_seeds(seed + 1, b, g), g)
    assert len(set(a) | set(nxt)) == 2 * b * g


def test_too_many_samples_for_the_seed_stride_refused():
    with pytest.raises(ValueError, match="exceed"):
        request_seeds(0, 1000, 101)


def test_allowed_ids_cover_the_padded_vocabulary():
    # Qwen-style: the tokenizer has 10 ids, lm_head 12 rows; 3 and 5 suppressed -> 12 - 2 = 10 ids
    allowed = allowed_token_ids(12, [3, 5])
    assert allowed == [0, 1, 2, 4, 6, 7, 8, 9, 10, 11]
    text = types.SimpleNamespace(vocab_size=12, max_position_embeddings=2048)
    cfg = types.SimpleNamespace(get_text_config=lambda: text, vocab_size=None)
    assert model_vocab_size(cfg) == 12


def test_max_model_len_follows_the_model():
    cfg = types.SimpleNamespace(get_text_config=lambda: types.SimpleNamespace(max_position_embeddings=2048))
    assert resolve_max_model_len(None, cfg) == 2048  # min(4096, 2048)
    assert resolve_max_model_len(1024, cfg) == 1024
    with pytest.raises(ValueError, match="vllm_max_model_len=4096 exceeds the model's max_position_embeddings=2048"):
        resolve_max_model_len(4096, cfg)
    big = types.SimpleNamespace(get_text_config=lambda: types.SimpleNamespace(max_position_embeddings=128000))
    assert resolve_max_model_len(None, big) == 4096


def test_processor_kwargs_carry_the_learners_pixel_limits(tiny_dir):
    from mmrlvr.config import ModelConfig
    from mmrlvr.models.load import load_policy

    _, proc = load_policy(ModelConfig(path=str(tiny_dir), min_pixels=28 * 28 * 2, max_pixels=28 * 28 * 9))
    kw = processor_kwargs(proc)
    assert kw["images_kwargs"]["size"] == {"shortest_edge": 1568, "longest_edge": 7056}  # 28*28*2, 28*28*9
    vsize = proc.video_processor.size  # whatever the learner's video processor resizes to
    assert kw["videos_kwargs"]["size"] == {"shortest_edge": vsize["shortest_edge"], "longest_edge": vsize["longest_edge"]}
    assert kw["videos_kwargs"]["cap_pixels_per_frame"] is True  # load_policy's qwen-vl-utils cap


def _clip(path, n=10, size=32, fps=5):
    import cv2

    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (size, size))
    for i in range(n):
        w.write(np.full((size, size, 3), 20 * i, np.uint8))
    w.release()
    return str(path)


def test_videos_decoded_as_the_learner_decodes_them(tmp_path):
    ref = VideoRef(_clip(tmp_path / "a.mp4"), nframes=4)
    limits = {"max_frames": 8, "max_pixels": 32 * 32, "total_pixels": None}
    frames, meta = decode_video(ref, max_frames=8, max_pixels=32 * 32)
    for video in (ref, DecodedVideo(frames, meta)):
        (got, m), = vllm_videos([video], limits)
        np.testing.assert_array_equal(got, frames)
        # 4 of 10 frames at 5 fps: the processor derives the sampled fps 4 / 10 * 5 = 2.0 from these
        assert (m["fps"], m["total_num_frames"], len(m["frames_indices"]), m["do_sample_frames"]) == (5.0, 10, 4, False)
    (shuffled, m), = vllm_videos([ShuffledVideo(ref, seed=1)], limits)
    perm = decode_video(ShuffledVideo(ref, seed=1))[1]["permutation"]
    np.testing.assert_array_equal(shuffled, frames[perm])  # content moved, timeline kept
    assert m["frames_indices"] == meta["frame_indices"]


def test_request_holds_decoded_media(tmp_path):
    from PIL import Image

    msgs = ({"role": "user", "content": [{"type": "video"}]},)
    s = Sample("v", msgs, 0, images=(Image.new("RGB", (20, 10)),), videos=(VideoRef(_clip(tmp_path / "b.mp4"), nframes=2),))
    req = vllm_request("p", s)
    assert req["prompt"] == "p" and req["multi_modal_data"]["image"][0].size == (20, 10)
    frames, meta = req["multi_modal_data"]["video"][0]
    assert frames.shape == (2, 32, 32, 3) and frames.dtype == np.uint8 and meta["fps"] == 5.0
    assert "multi_modal_data" not in vllm_request("p", Sample("t", msgs, 0))
