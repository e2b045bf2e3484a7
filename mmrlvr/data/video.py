"""Video decoding: `load_video`, the `VideoRef` a Sample holds, and the frame shuffle of
temporal contrast.

Frame times come from the container's timestamps (packet pts, read without decoding): for a
variable-frame-rate clip, `fps` sampling and `start`/`end` pick frames by their real times
(`sample_indices_by_time`), where the average rate would misplace them by seconds.

Frames are decoded when a batch is encoded (`decode_video`), never when a dataset is built.
decord first; PyAV and then OpenCV for what decord cannot read (animated GIF, odd AVI). Every
name here is also importable from `mmrlvr.data.media`, the one module callers need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmrlvr.data.frame_times import (  # noqa: F401 - the count rule is re-exported from here
    DEFAULT_FPS, FRAME_FACTOR, IMAGE_FORMATS, MAX_SAMPLED_FRAMES, _cap, _duration, _even, _probe, frame_count,
    is_variable_rate, sample_indices_by_time)
from mmrlvr.data.media_error import MediaError

VIDEO_BACKENDS: tuple[str, ...] = ("decord", "pyav", "opencv")
"""Tried in this order; a backend that fails to open or decode a file hands it to the next."""
class _Truncated(Exception):
    """The container declares more frames than can be decoded: never sampled from silently."""


def sample_indices(
    total_frames: int, video_fps: float, *, nframes: int | None = None, fps: float | None = None,
    max_frames: int | None = None, start: float | None = None, end: float | None = None,
) -> tuple[list[int], float, int]:
    """(frame indices, sampled fps, frames spanned) for a video of `total_frames` at `video_fps`.

    Uniform over [start, end] (seconds; the whole clip by default) with qwen-vl-utils' rule
    `linspace(first, last, n).round()`: `nframes` frames (rounded up to even), or `fps` frames per
    second (rounded down to even, at most one per source frame), or DEFAULT_FPS; `max_frames`
    caps the count (rounded down to even). The sampled fps is `n / span * video_fps`, the rate
    the processor turns into temporal position ids (`second_per_grid_ts`). A clip shorter than
    two frames repeats a frame: the repeats are visible in the indices.
    """
    if nframes is not None and fps is not None:
        raise ValueError("give nframes or fps, not both")
    if total_frames <= 0 or not video_fps > 0:
        raise ValueError(f"no frames to sample ({total_frames} frames at {video_fps} fps)")
    first = 0 if start is None else math.ceil(max(0.0, start) * video_fps)
    last = total_frames - 1 if end is None else min(total_frames - 1, math.floor(end * video_fps))
    if first > last:
        raise ValueError(f"empty time range [{start}, {end}] s of a {total_frames / video_fps:.2f} s clip")
    span = last - first + 1
    n = frame_count(nframes, fps, span / video_fps, span, max_frames)
    idx = np.linspace(first, last, n).round().astype(int).tolist()
    return idx, n / span * video_fps, span


def fit_pixels(height: int, width: int, max_pixels: int | None) -> tuple[int, int]:
    """(h, w) with h * w <= max_pixels and the aspect ratio kept (unchanged if it already fits)."""
    if max_pixels is None or height * width <= max_pixels:
        return height, width
    s = math.sqrt(max_pixels / (height * width))
    return max(1, math.floor(height * s)), max(1, math.floor(width * s))


def resize_frames(frames: np.ndarray, max_pixels: int | None) -> np.ndarray:
    """(T, H, W, 3) uint8 -> frames of at most `max_pixels` each, aspect kept (area filter)."""
    h, w = frames.shape[1:3]
    nh, nw = fit_pixels(h, w, max_pixels)
    if (nh, nw) == (h, w):
        return frames
    import cv2

    return np.stack([cv2.resize(f, (nw, nh), interpolation=cv2.INTER_AREA) for f in frames])


def _check_complete(decoded: int, probe: dict | None) -> None:
    declared = (probe or {}).get("frames", 0)
    if declared and decoded < declared - max(2, declared // 50):
        raise _Truncated(f"the container declares {declared} frames but only {decoded} can be read")


def _decode_decord(path: str, want, max_pixels: int | None, probe: dict | None):
    import decord

    kw = {}
    if probe and max_pixels is not None:  # let ffmpeg scale while decoding: cheaper than after
        h, w = fit_pixels(probe["height"], probe["width"], max_pixels)
        if (h, w) != (probe["height"], probe["width"]):
            kw = {"height": h, "width": w}
    vr = decord.VideoReader(path, **kw)
    total, vfps = len(vr), float(vr.get_avg_fps())
    _check_complete(total, probe)
    idx, sfps, span = want(total, vfps)
    batch = vr.get_batch(idx)
    frames = batch.asnumpy() if hasattr(batch, "asnumpy") else np.asarray(batch)
    return frames, total, vfps, idx, sfps, span


def _decode_pyav(path: str, want, max_pixels: int | None, probe: dict | None):
    import av

    with av.open(path) as c:
        stream = c.streams.video[0]
        stream.thread_type = "AUTO"
        declared = int(stream.frames or 0)
        vfps = float(stream.average_rate or stream.guessed_rate or 0)
        plan = want(declared, vfps) if declared and vfps else None
        wanted = set(plan[0]) if plan else None
        kept: dict[int, np.ndarray] = {}
        count = 0
        for i, frame in enumerate(c.decode(stream)):
            count = i + 1
            if wanted is None or i in wanted:
                kept[i] = resize_frames(frame.to_ndarray(format="rgb24")[None], max_pixels)[0]
            if plan and i >= plan[0][-1]:
                break
    if plan is None:  # the container does not say how many frames: decode all, then sample
        _check_complete(count, probe)
        idx, sfps, span = want(count, vfps or DEFAULT_FPS)
        return np.stack([kept[i] for i in idx]), count, vfps or DEFAULT_FPS, idx, sfps, span
    if plan[0][-1] >= count:
        raise _Truncated(f"the container declares {declared} frames but decoding stopped after {count}")
    idx, sfps, span = plan
    return np.stack([kept[i] for i in idx]), declared, vfps, idx, sfps, span


def _decode_opencv(path: str, want, max_pixels: int | None, probe: dict | None):
    import cv2

    cap = cv2.VideoCapture(path)
    try:
        if not cap.isOpened():
            raise RuntimeError("OpenCV cannot open it")
        total, vfps = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), float(cap.get(cv2.CAP_PROP_FPS))
        idx, sfps, span = want(total, vfps)
        kept: dict[int, np.ndarray] = {}
        wanted = set(idx)
        for i in range(idx[-1] + 1):
            if not cap.grab():
                raise _Truncated(f"the container declares {total} frames but decoding stopped after {i}")
            if i in wanted:
                ok, bgr = cap.retrieve()
                if not ok:
                    raise RuntimeError(f"frame {i} does not decode")
                kept[i] = resize_frames(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)[None], max_pixels)[0]
    finally:
        cap.release()
    return np.stack([kept[i] for i in idx]), total, vfps, idx, sfps, span


_DECODERS = {"decord": _decode_decord, "pyav": _decode_pyav, "opencv": _decode_opencv}


def load_video(
    path, *, nframes: int | None = None, fps: float | None = None, max_frames: int | None = None,
    max_pixels: int | None = None, start: float | None = None, end: float | None = None,
) -> tuple[np.ndarray, dict]:
    """Decode sampled frames of a video file: ((T, H, W, 3) uint8 frames, meta).

    Sampling as `sample_indices` (uniform, or at `fps`; an even count for Qwen's temporal
    patches); each frame resized to at most `max_pixels` with its aspect ratio kept. `meta`:
    `fps` (the file's; for a variable rate, frames over duration), `frame_indices`,
    `total_frames`, `duration` (s), `sampled_fps`, `span_frames` (frames between start and end),
    `backend`, `timestamps` (s, each sampled frame's), `variable_rate`. A missing, empty, truncated or
    undecodable file raises `MediaError` naming the file and what failed, never a substitute.
    """
    name = str(path)
    p = Path(name)
    try:
        found = p.is_file()
    except (OSError, ValueError) as exc:  # a name the file system cannot look up: bad media, not a crash
        raise MediaError(f"{name[:200]}: not a usable path ({type(exc).__name__})") from None
    if not found:
        raise MediaError(f"{name}: no such video file")
    if p.stat().st_size == 0:
        raise MediaError(f"{name}: empty video file (0 bytes)")
    if nframes is not None and fps is not None:
        raise MediaError(f"{name}: give nframes or fps, not both")
    for key, value in (("start", start), ("end", end)):  # NaN would silently mean the whole clip
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise MediaError(f"{name}: {key}={value} is not a time in seconds")
    probe = _probe(name)
    if probe is not None and probe.get("format") in IMAGE_FORMATS:
        raise MediaError(f"{name}: is a still image ({probe['format']}), not a video")
    times = (probe or {}).get("times")
    variable = {}  # filled when the frame times, not the average rate, placed the frames

    def want(total: int, vfps: float):
        try:
            if times is not None and len(times) == total and is_variable_rate(times):
                variable["times"] = times
                return sample_indices_by_time(times, total / _duration(times), nframes=nframes, fps=fps, max_frames=max_frames, start=start, end=end)
            return sample_indices(total, vfps, nframes=nframes, fps=fps, max_frames=max_frames, start=start, end=end)
        except ValueError as exc:
            raise MediaError(f"{name}: {exc}") from None

    failures = []
    for backend in VIDEO_BACKENDS:
        try:
            frames, total, vfps, idx, sfps, span = _DECODERS[backend](name, want, max_pixels, probe)
        except MediaError:
            raise
        except _Truncated as exc:
            raise MediaError(f"{name}: truncated or corrupt video: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a decoder's own error: try the next one
            failures.append(f"{backend}: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ''}")
            continue
        frames = resize_frames(np.ascontiguousarray(frames, dtype=np.uint8), max_pixels)
        meta = {"fps": vfps, "frame_indices": idx, "total_frames": total, "duration": total / vfps,
                "sampled_fps": sfps, "span_frames": span, "backend": backend,
                "timestamps": [round(i / vfps, 6) for i in idx], "variable_rate": False}
        if variable:  # the average rate over the real duration; each frame's own time
            t = variable["times"]
            duration = _duration(t)
            meta.update(fps=total / duration, duration=duration, timestamps=[round(t[i], 6) for i in idx],
                        variable_rate=True)
        return frames, meta
    raise MediaError(f"{name}: cannot decode video ({'; '.join(failures)})")


@dataclass(frozen=True)
class VideoRef:
    """A video file and how to sample it; `load_video` decodes it when its batch is encoded."""

    path: str
    nframes: int | None = None  # frames to sample uniformly (rounded up to even)
    fps: float | None = None  # or: frames per second to sample
    max_frames: int | None = None  # cap on the sampled count
    max_pixels: int | None = None  # per-frame pixel cap (aspect kept)
    start: float | None = None  # seconds
    end: float | None = None  # seconds

    def load(self, max_frames: int | None = None, max_pixels: int | None = None) -> tuple[np.ndarray, dict]:
        """Decode; run-wide limits (config) tighten this reference's own, never loosen them."""
        return load_video(
            self.path, nframes=self.nframes, fps=self.fps, max_frames=_tighter(self.max_frames, max_frames),
            max_pixels=_tighter(self.max_pixels, max_pixels), start=self.start, end=self.end,
        )


@dataclass(frozen=True)
class ShuffledVideo:
    """The same sampled frames as `video`, in a seeded random order (temporal contrast).

    Only the content moves: `meta` keeps the ordered timeline (indices, fps), so position ids
    match the ordered prompt exactly; `meta["permutation"]` records the order shown.
    """

    video: Any
    seed: int

    def load(self, max_frames: int | None = None, max_pixels: int | None = None) -> tuple[np.ndarray, dict]:
        frames, meta = decode_video(self.video, max_frames=max_frames, max_pixels=max_pixels)
        perm = shuffle_order(len(frames), self.seed)
        return frames[perm], {**meta, "permutation": perm}


def shuffle_order(n: int, seed: int) -> list[int]:
    """A seeded permutation of range(n) that is not the identity (when n > 1)."""
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n).tolist()
        if n < 2 or perm != list(range(n)):
            return perm


def _tighter(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def decode_video(video: Any, max_frames: int | None = None, max_pixels: int | None = None) -> tuple[np.ndarray, dict]:
    """Any video a Sample may hold -> ((T, H, W, 3) uint8, meta).

    A reference with `load()` (VideoRef, ShuffledVideo, a task's own generator) is decoded; an
    already-decoded array or list of PIL frames passes through, taken as sampled at DEFAULT_FPS,
    uniformly thinned to `max_frames` and resized to `max_pixels`.
    """
    if hasattr(video, "load"):
        return video.load(max_frames=max_frames, max_pixels=max_pixels)
    frames = np.stack([np.asarray(f.convert("RGB")) for f in video]) if isinstance(video, (list, tuple)) else np.asarray(video)
    if frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) == 0:
        raise MediaError(f"<in-memory video>: expected (T, H, W, 3) frames, got shape {frames.shape}")
    total = len(frames)
    idx = list(range(total))
    if max_frames is not None and total > max_frames:
        idx = np.linspace(0, total - 1, _even(max_frames, up=False)).round().astype(int).tolist()
        frames = frames[idx]
    frames = resize_frames(np.ascontiguousarray(frames, dtype=np.uint8), max_pixels)
    meta = {"fps": DEFAULT_FPS, "frame_indices": idx, "total_frames": total, "duration": total / DEFAULT_FPS,
            "sampled_fps": len(idx) / total * DEFAULT_FPS, "span_frames": total, "backend": "array"}
    return frames, meta


def fit_total_pixels(videos: list[tuple[np.ndarray, dict]], total_pixels: int | None) -> list[tuple[np.ndarray, dict]]:
    """Shrink one sample's videos evenly so that all their frames together hold <= total_pixels."""
    used = sum(f.shape[0] * f.shape[1] * f.shape[2] for f, _ in videos)
    if total_pixels is None or used <= total_pixels:
        return videos
    scale = total_pixels / used
    return [(resize_frames(f, max(1, int(f.shape[1] * f.shape[2] * scale))), m) for f, m in videos]


def processor_metadata(meta: dict) -> dict:
    """The stock video processor's metadata for frames we sampled ourselves.

    transformers derives the sampled fps as `len(frames_indices) / total_num_frames * fps`, and
    from it `second_per_grid_ts` (Qwen2.5-VL) or timestamps (Qwen3-VL); without it the processor
    assumes 24 fps and the temporal position ids are wrong.
    """
    return {"total_num_frames": meta["span_frames"], "fps": meta["fps"], "frames_indices": list(meta["frame_indices"])}
