"""Variable-frame-rate video: frames are placed by the container's timestamps, not the average rate."""

from fractions import Fraction

import numpy as np
import pytest

from mmrlvr.data.media import MediaError, load_video  # media first: it imports video
import mmrlvr.data.video as video  # noqa: E402
from mmrlvr.data.video import is_variable_rate, sample_indices_by_time

# 10 frames 0.1 s apart, then 10 frames 1 s apart: frame i is grey level 10 * i
TIMES = [round(0.1 * i, 1) for i in range(10)] + [1.0 + i for i in range(10)]


@pytest.fixture(scope="module")
def vfr(tmp_path_factory):
    import av

    path = tmp_path_factory.mktemp("vfr") / "vfr.mp4"
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=None)
        s.width = s.height = 32
        s.pix_fmt = "yuv420p"
        s.time_base = s.codec_context.time_base = Fraction(1, 1000)
        for i, t in enumerate(TIMES):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 10 * i, np.uint8), format="rgb24")
            frame.pts, frame.time_base = int(round(t * 1000)), Fraction(1, 1000)
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


@pytest.mark.parametrize("backend", ["decord", "pyav", "opencv"])
def test_start_end_and_fps_follow_the_timestamps(vfr, monkeypatch, backend):
    monkeypatch.setattr(video, "VIDEO_BACKENDS", (backend,))
    frames, meta = load_video(vfr, start=5.0, end=8.0, nframes=4)
    # the frames at 5, 6, 7, 8 s are indices 14..17 (10 + (t - 1)); the average rate (20 frames over
    # 10 s + one mean interval 10/19 s = 10.53 s: 1.9 fps) would put 5.0 s at index ceil(5.0 * 1.9) = 10 (1.0 s)
    assert meta["frame_indices"] == [14, 15, 16, 17] and meta["timestamps"] == [5.0, 6.0, 7.0, 8.0]
    assert [round(f.mean() / 10) for f in frames] == [14, 15, 16, 17]  # the decoded pixels are those frames
    assert meta["variable_rate"] and meta["fps"] == pytest.approx(1.9)
    # 1 fps over the 10.53 s clip: n = even(floor(10.53)) = 10 frames at 0, 1.11, ..., 10 s -> nearest frames
    _, meta = load_video(vfr, fps=1.0)
    assert meta["timestamps"] == [0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]


def test_sample_indices_by_time_by_hand():
    t = [0.0, 0.1, 0.2, 3.0, 6.0]
    assert not is_variable_rate([0.0, 0.5, 1.0, 1.5]) and is_variable_rate(t)
    # nframes=2 -> targets 0 and 6 s: indices 0, 4; span 5 frames, sampled fps 2 / 5 * 1.0
    assert sample_indices_by_time(t, 1.0, nframes=2) == ([0, 4], 0.4, 5)
    # start=0.15 -> first frame at or after: 0.2 s (index 2); end=3 -> index 3; 2 frames
    assert sample_indices_by_time(t, 1.0, nframes=2, start=0.15, end=3.0)[0] == [2, 3]
    with pytest.raises(ValueError, match="empty time range"):
        sample_indices_by_time(t, 1.0, start=6.5)


def test_bad_times_counts_and_stills_are_media_errors(vfr, tmp_path):
    with pytest.raises(MediaError, match="start=nan is not a time"):
        load_video(vfr, start=float("nan"))
    with pytest.raises(MediaError, match="10000000 frames to sample is more than 4096"):
        load_video(vfr, nframes=10**7)
    from PIL import Image

    still = tmp_path / "still.mp4"
    Image.new("RGB", (16, 16)).save(still, format="PNG")
    with pytest.raises(MediaError, match=r"still.mp4: is a still image \(png_pipe\), not a video"):
        load_video(still)
