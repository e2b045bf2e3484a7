"""Frame times from a container's timestamps, and sampling by time for variable-frame-rate video.

A variable-frame-rate clip (phone recordings, screen captures) has frames at uneven times, so a
frame index divided by the average rate misplaces frames by seconds. `_probe` reads every frame's
presentation time from the packet timestamps (no decoding) and `sample_indices_by_time` picks
frames by those times. The frame-count rule (`frame_count`, DEFAULT_FPS, even counts) lives here too,
shared by constant- and variable-rate sampling. Used by `mmrlvr.data.video.load_video`.
"""

from __future__ import annotations

import math

import numpy as np

IMAGE_FORMATS = ("image2", "png_pipe", "jpeg_pipe", "bmp_pipe", "webp_pipe", "tiff_pipe", "j2k_pipe", "qoi_pipe")
"""Containers that hold a still image: a PNG renamed .mp4 is not a 1-frame video."""


FRAME_FACTOR = 2
"""Qwen-VL's temporal patch: frames are merged in pairs, so a sampled count is rounded to even."""
DEFAULT_FPS = 2.0
"""Sampling rate when neither `nframes` nor `fps` is given (qwen-vl-utils' default)."""


MAX_SAMPLED_FRAMES = 4096
"""More sampled frames than this are refused (a decoder asked for 10**7 frames aborts the process)."""


def _even(n: float, up: bool) -> int:
    k = math.ceil(n / FRAME_FACTOR) if up else math.floor(n / FRAME_FACTOR)
    return max(FRAME_FACTOR, k * FRAME_FACTOR)


def frame_count(nframes: int | None, fps: float | None, seconds: float, span: int, max_frames: int | None) -> int:
    """How many frames to sample from `span` frames lasting `seconds`: `nframes` rounded up to even,
    else `fps` (default DEFAULT_FPS) over the range rounded down to even, capped by `max_frames`.
    One rule for constant- and variable-rate clips."""
    if nframes is not None:
        if nframes < 1:
            raise ValueError(f"nframes must be >= 1, got {nframes}")
        n = _even(nframes, up=True)
    else:
        rate = DEFAULT_FPS if fps is None else fps
        if not rate > 0:
            raise ValueError(f"fps must be > 0, got {fps}")
        n = _even(min(seconds * rate, span), up=False)
    return _cap(n, max_frames)


def _cap(n: int, max_frames: int | None) -> int:
    if max_frames is not None:
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        n = min(n, _even(max_frames, up=False))
    if n > MAX_SAMPLED_FRAMES:
        raise ValueError(f"{n} frames to sample is more than {MAX_SAMPLED_FRAMES}; set max_frames")
    return n


def _probe(path: str) -> dict | None:
    """What the container declares (frame count, size, format) and every frame's presentation
    time in seconds from the start (packet timestamps, read without decoding; None when some
    packet has none); None if PyAV cannot open it."""
    try:
        import av

        with av.open(path) as c:
            s = c.streams.video[0]
            out = {"frames": int(s.frames or 0), "height": s.codec_context.height, "width": s.codec_context.width,
                   "format": c.format.name, "times": None}
            if c.format.name in IMAGE_FORMATS:
                return out
            pts, missing = [], False
            for packet in c.demux(s):
                if packet.size == 0:  # the flush packet at the end
                    continue
                if packet.pts is None:
                    missing = True
                    break
                pts.append(packet.pts)
            if pts and not missing and s.time_base:
                pts.sort()  # decode order -> presentation order (B-frames)
                out["times"] = [float((p - pts[0]) * s.time_base) for p in pts]
            return out
    except Exception:  # noqa: BLE001 - the decoders report the real failure
        return None


def is_variable_rate(times: list[float], tolerance: float = 0.5) -> bool:
    """Whether frame times stray from a constant rate by more than `tolerance` frame intervals."""
    if len(times) < 3 or not times[-1] > times[0]:
        return False
    step = (times[-1] - times[0]) / (len(times) - 1)
    grid = times[0] + step * np.arange(len(times))
    return bool(np.max(np.abs(np.asarray(times) - grid)) > tolerance * step)


def sample_indices_by_time(
    times: list[float], video_fps: float, *, nframes: int | None = None, fps: float | None = None,
    max_frames: int | None = None, start: float | None = None, end: float | None = None,
) -> tuple[list[int], float, int]:
    """`sample_indices` for frames at the given presentation times (s, ascending; variable rate).

    [start, end] selects frames by their times; the n sampled frames are those nearest to n
    times spread evenly over the range (n as in `sample_indices`, with the range's length in
    seconds for `fps`). The sampled fps is `n / span * video_fps` as for a constant rate, so the
    processor's temporal position ids see the same average spacing.
    """
    if nframes is not None and fps is not None:
        raise ValueError("give nframes or fps, not both")
    t = np.asarray(times, dtype=float)
    total = len(t)
    if total == 0 or not video_fps > 0:
        raise ValueError(f"no frames to sample ({total} frames at {video_fps} fps)")
    eps = 1e-6
    first = 0 if start is None else int(np.searchsorted(t, max(0.0, start) - eps, side="left"))
    last = total - 1 if end is None else int(np.searchsorted(t, end + eps, side="right")) - 1
    if first > last or first >= total or last < 0:
        raise ValueError(f"empty time range [{start}, {end}] s of a {t[-1]:.2f} s clip")
    span = last - first + 1
    seconds = (t[last] - t[first]) * span / max(1, span - 1) if span > 1 else 1.0 / video_fps
    n = frame_count(nframes, fps, seconds, span, max_frames)
    targets = np.linspace(t[first], t[last], n)
    right = np.clip(np.searchsorted(t, targets), first, last)
    left = np.clip(right - 1, first, last)
    idx = np.where(np.abs(t[left] - targets) <= np.abs(t[right] - targets), left, right)
    return idx.astype(int).tolist(), n / span * video_fps, span


def _duration(times: list[float]) -> float:
    """A clip's length from its frame times: the last frame's time plus one mean interval."""
    return times[-1] * len(times) / max(1, len(times) - 1)


def container_duration(path: str) -> float | None:
    """A clip's length in seconds from the container header (the video stream's duration, else
    the container's), without decoding a frame; None when PyAV cannot open it or it declares none.

    Used at load to refuse a temporal segment that ends after the clip (it could never score)."""
    try:
        import av

        with av.open(path) as c:
            if c.format.name in IMAGE_FORMATS:
                return None
            s = c.streams.video[0]
            if s.duration and s.time_base:
                seconds = float(s.duration * s.time_base)
            elif c.duration:
                seconds = c.duration / av.time_base
            else:
                return None
    except Exception:  # noqa: BLE001 - an unreadable clip is reported when it is decoded
        return None
    return seconds if seconds > 0 else None
