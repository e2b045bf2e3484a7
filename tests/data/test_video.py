"""load_video: sampling arithmetic, every shared clip, the GIF/AVI fallbacks, and clear errors."""

import json
import shutil

import numpy as np
import pytest

import mmrlvr.data.media as media
import mmrlvr.data.video as video_module
from mmrlvr.data.media import (
    MediaError, ShuffledVideo, VideoRef, decode_video, fit_pixels, fit_total_pixels, load_video,
    processor_metadata, sample_indices,
)

AVI = "mmaction2__tests_data_test.avi"  # XviD + MP3, 164 frames at 25 fps, 320x240


def test_uniform_indices_by_hand():
    # 300 frames at 30 fps, 16 frames: step 299 / 15 = 19.93 -> 0, 19.93, 39.87, ... rounded
    idx, sfps, span = sample_indices(300, 30.0, nframes=16)
    assert idx[:4] == [0, 20, 40, 60] and idx[-1] == 299 and len(idx) == 16
    assert sfps == pytest.approx(16 / 300 * 30) and span == 300  # 1.6 frames per second
    assert len(sample_indices(300, 30.0, nframes=5)[0]) == 6  # odd counts round up to even


def test_fps_sampling_range_and_caps():
    # default 2 fps over a 10 s clip: 20 frames
    assert len(sample_indices(300, 30.0)[0]) == 20
    # 10 fps would be 100 frames; max_frames=7 caps to 6 (even, rounded down)
    assert len(sample_indices(300, 30.0, fps=10.0, max_frames=7)[0]) == 6
    # [2 s, 4 s] at 30 fps: frames 60..120 (61 frames); 61 / 30 * 2 = 4.07 -> 4 frames
    idx, sfps, span = sample_indices(300, 30.0, start=2.0, end=4.0)
    assert idx == [60, 80, 100, 120] and span == 61 and sfps == pytest.approx(4 / 61 * 30)
    # asking for more frames per second than the clip has gives each frame once
    assert sample_indices(6, 10.0, fps=100.0)[0] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="empty time range"):
        sample_indices(300, 30.0, start=5.0, end=4.0)
    with pytest.raises(ValueError, match="not both"):
        sample_indices(300, 30.0, nframes=4, fps=2.0)


def test_indices_match_qwen_vl_utils():
    """The same frames as qwen-vl-utils' decord reader picks, for nframes and for fps."""
    from qwen_vl_utils.vision_process import calculate_video_frame_range, smart_nframes

    for ele in ({"nframes": 16}, {"fps": 2.0}, {"fps": 2.0, "video_start": 1.5, "video_end": 6.0}):
        first, last, total = calculate_video_frame_range(ele, 300, 30.0)
        n = smart_nframes(ele, total_frames=total, video_fps=30.0)
        want = np.linspace(first, last, n).round().astype(int).tolist()
        got, sfps, _ = sample_indices(300, 30.0, nframes=ele.get("nframes"), fps=ele.get("fps"),
                                      start=ele.get("video_start"), end=ele.get("video_end"))
        assert got == want and sfps == pytest.approx(n / total * 30.0)


def test_fit_pixels_keeps_aspect():
    # 240 x 320 into 4800 pixels: scale sqrt(4800 / 76800) = 0.25 -> 60 x 80
    assert fit_pixels(240, 320, 4800) == (60, 80)
    assert fit_pixels(240, 320, None) == (240, 320) and fit_pixels(240, 320, 10**6) == (240, 320)


def _clips(shared_data):
    rows = [json.loads(x) for x in (shared_data / "video_clips" / "manifest.jsonl").read_text().splitlines() if x]
    return [shared_data / "video_clips" / r["file"] for r in rows]


def test_avi_matches_bare_decord(shared_data):
    import decord

    path = shared_data / "video_clips" / AVI
    frames, meta = load_video(path, nframes=16)
    vr = decord.VideoReader(str(path))
    want = np.linspace(0, len(vr) - 1, 16).round().astype(int).tolist()
    assert meta["frame_indices"] == want and meta["total_frames"] == 164 and meta["fps"] == 25.0
    assert meta["duration"] == pytest.approx(164 / 25) and meta["backend"] == "decord"
    assert np.array_equal(frames, vr.get_batch(want).asnumpy())
    small, smeta = load_video(path, nframes=4, max_pixels=4800)
    assert small.shape == (4, 60, 80, 3) and small.dtype == np.uint8


@pytest.mark.slow
def test_every_shared_clip(shared_data):
    import decord

    clips = _clips(shared_data)
    assert len(clips) == 11
    for path in clips:
        vr = decord.VideoReader(str(path))
        h, w = vr[0].shape[:2]
        frames, meta = load_video(path, nframes=4, max_pixels=96 * 96)
        assert meta["total_frames"] == len(vr), path.name
        if meta["variable_rate"]:  # demo_skeleton.mp4: frame intervals 33-200 ms; 4 frames evenly spread in time
            t = vr.get_frame_timestamp(list(range(len(vr))))[:, 0]
            want = [int(np.abs(t - x).argmin()) for x in np.linspace(t[0], t[-1], 4)]
            assert meta["frame_indices"] == want and path.name == "mmaction2__demo_demo_skeleton.mp4"
        else:
            assert meta["frame_indices"] == np.linspace(0, len(vr) - 1, 4).round().astype(int).tolist(), path.name
        assert frames.shape == (4, *fit_pixels(h, w, 96 * 96), 3), path.name
        assert frames.std() > 1.0, path.name  # real pixels, not a blank substitute


@pytest.fixture
def gif(tmp_path):
    from PIL import Image

    frames = [Image.fromarray(np.full((40, 60, 3), 30 * i, np.uint8)) for i in range(6)]
    path = tmp_path / "grey.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return path


def test_gif_through_the_fallbacks(gif, monkeypatch):
    # decord cannot read an animated GIF ("broken metadata"): PyAV decodes it
    frames, meta = load_video(gif, nframes=6)
    assert meta["backend"] == "pyav" and meta["fps"] == 10.0 and meta["total_frames"] == 6
    assert frames.shape == (6, 40, 60, 3)
    assert [int(f.mean()) for f in frames] == [0, 30, 60, 90, 120, 150]
    monkeypatch.setattr(video_module, "VIDEO_BACKENDS", ("opencv",))
    cv, cmeta = load_video(gif, nframes=6)
    assert cmeta["backend"] == "opencv" and np.array_equal(cv, frames)


@pytest.mark.parametrize("backend", ["pyav", "opencv"])
def test_avi_through_each_fallback(shared_data, monkeypatch, backend):
    path = shared_data / "video_clips" / AVI
    ref, rmeta = load_video(path, nframes=6, max_pixels=4800)
    monkeypatch.setattr(video_module, "VIDEO_BACKENDS", (backend,))
    frames, meta = load_video(path, nframes=6, max_pixels=4800)
    assert meta["backend"] == backend and meta["frame_indices"] == rmeta["frame_indices"]
    assert meta["total_frames"] == 164 and frames.shape == ref.shape == (6, 60, 80, 3)
    # the same XviD frames through another decoder: equal up to rounding in the scaler
    assert np.abs(frames.astype(int) - ref.astype(int)).mean() < 4.0


def test_truncated_missing_empty_and_garbage_files(shared_data, tmp_path):
    data = (shared_data / "video_clips" / AVI).read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: len(data) // 2])  # decord would quietly report 77 of 164 frames
    with pytest.raises(MediaError, match=r"cut\.avi: truncated.*declares 164 frames"):
        load_video(cut, nframes=8)
    mp4 = tmp_path / "cut.mp4"
    mp4.write_bytes((shared_data / "video_clips" / "mmaction2__tests_data_test.mp4").read_bytes()[:50_000])
    with pytest.raises(MediaError, match=r"cut\.mp4: cannot decode video \(decord: .*pyav: .*opencv: "):
        load_video(mp4)
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(MediaError, match=r"empty\.mp4: empty video file"):
        load_video(tmp_path / "empty.mp4")
    with pytest.raises(MediaError, match=r"missing\.mp4: no such video file"):
        load_video(tmp_path / "missing.mp4")
    with pytest.raises(MediaError, match=r"test\.avi: empty time range"):
        load_video(shared_data / "video_clips" / AVI, start=9.0, end=8.0)


def test_video_ref_limits_only_tighten(shared_data):
    path = str(shared_data / "video_clips" / AVI)
    ref = VideoRef(path, nframes=8, max_pixels=4800)
    frames, _ = ref.load(max_frames=4, max_pixels=10**6)
    assert frames.shape == (4, 60, 80, 3)  # 8 frames capped to 4; 4800 px kept (config is looser)


def test_decoded_arrays_and_shuffled_frames():
    video = np.stack([np.full((8, 8, 3), 10 * i, np.uint8) for i in range(8)])
    frames, meta = decode_video(video, max_frames=4)
    # 8 frames thinned to 4: linspace(0, 7, 4) = 0, 2.33, 4.67, 7 -> 0, 2, 5, 7
    assert meta["frame_indices"] == [0, 2, 5, 7] and [int(f[0, 0, 0]) for f in frames] == [0, 20, 50, 70]
    assert meta["sampled_fps"] == pytest.approx(4 / 8 * 2.0)
    shuf, smeta = decode_video(ShuffledVideo(video, seed=3))
    perm = smeta["permutation"]
    assert sorted(perm) == list(range(8)) and perm != list(range(8))
    assert np.array_equal(shuf, video[perm])
    assert smeta["frame_indices"] == list(range(8))  # the timeline (position ids) is not shuffled


def test_total_pixels_per_sample():
    a, b = np.zeros((4, 40, 40, 3), np.uint8), np.zeros((2, 40, 40, 3), np.uint8)
    out = fit_total_pixels([(a, {}), (b, {})], total_pixels=2400)
    # 6 frames x 1600 px = 9600 > 2400: each frame to 400 px -> 20 x 20
    assert [f.shape for f, _ in out] == [(4, 20, 20, 3), (2, 20, 20, 3)]
    assert sum(f.shape[0] * f.shape[1] * f.shape[2] for f, _ in out) <= 2400


def test_processor_metadata_gives_the_sampled_fps():
    from transformers.video_utils import VideoMetadata

    # [2 s, 4 s] of a 300-frame 30 fps clip: 4 frames over the 61 frames spanned -> 4 / 61 * 30
    meta = {"fps": 30.0, "frame_indices": [60, 80, 100, 120], "span_frames": 61, "total_frames": 300}
    md = VideoMetadata(**processor_metadata(meta))
    assert md.sampled_fps == pytest.approx(4 / 61 * 30.0)


def test_two_frame_shuffle_is_never_in_order():
    # with 2 frames a random permutation is the identity half the time; the contrast needs the swap
    assert all(video_module.shuffle_order(2, seed) == [1, 0] for seed in range(40))
    frames = np.stack([np.full((4, 4, 3), 10, np.uint8), np.full((4, 4, 3), 200, np.uint8)])
    for seed in range(8):
        shown, meta = video_module.ShuffledVideo(frames, seed).load()
        assert meta["permutation"] == [1, 0] and shown[0, 0, 0, 0] == 200 and shown[1, 0, 0, 0] == 10
    assert video_module.shuffle_order(1, 0) == [0]
