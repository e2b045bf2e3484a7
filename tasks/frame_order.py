"""Frame order: a clip cut into k segments, shown shuffled and labelled A, B, C...; answer their
true order ("C, A, B"), scored by the `order` verifier (Kendall tau, or `metric: exact`).

Two sources, one task:

- synthetic (default): a bar fills up over the clip, so each segment carries its time; generated
  from the seed, rendered when its batch is encoded, learnable by the tiny model on CPU.
- `video_dir=...`: any directory of real videos (mp4, avi, webm, mkv, mov, gif). Each clip is cut
  into k equal time segments, each a `VideoRef` decoded lazily (`seg_frames` frames each). Whole
  videos are held out (by a hash of the file name), so eval never shows a training clip.
"""

from __future__ import annotations

import dataclasses
import random
import string
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mmrlvr.data.media import VideoRef, decode_video, load_video
from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.tasks._policy import renamed
from mmrlvr.types import Sample

MEDIA = ("video",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('order',)  # what its samples are scored by (each sample's own verifier)

VIDEO_EXTS = (".mp4", ".avi", ".webm", ".mkv", ".mov", ".gif")
SIZE = 56


@dataclass(frozen=True)
class BarSegment:
    """Frames `first..first+n-1` of a `total`-frame clip in which a bar fills from `low` to `high`."""

    first: int
    n: int
    total: int
    low: float  # fill level (0-1) before the first frame
    high: float  # fill level at the last frame
    x: int  # left edge of the bar
    color: tuple[int, int, int]

    def load(self, max_frames: int | None = None, max_pixels: int | None = None):
        out = np.full((self.n, SIZE, SIZE, 3), 235, np.uint8)
        for t in range(self.n):
            level = self.low + (self.high - self.low) * (self.first + t + 1) / self.total
            top = SIZE - 4 - int(round(level * (SIZE - 8)))
            out[t, top : SIZE - 4, self.x : self.x + 16] = self.color
        return decode_video(out, max_frames=max_frames, max_pixels=max_pixels)


def fields(k: int) -> dict:
    """What a prompt_template sees: the segment count, their labels and the shipped wording."""
    labels = list(string.ascii_uppercase[:k])
    example = ", ".join(reversed(labels))
    return {"k": k, "labels": labels, "example": example,
            "question": f"These {k} segments of one video are shuffled. Order them by time.",
            "answer_format": f"Answer as <answer>{example}</answer>."}


def _prompt(k: int) -> tuple[dict, ...]:
    """"A:" <video> "B:" <video> ... then the question; a template replaces only the question."""
    labels = string.ascii_uppercase[:k]
    content = []
    for lab in labels:
        content += [{"type": "text", "text": f"{lab}:"}, {"type": "video"}]
    content.append({"type": "text", "text": f"These {k} segments of one video are shuffled. Order them "
                    f"by time, e.g. <answer>{', '.join(reversed(labels))}</answer>."})
    return ({"role": "user", "content": content},)


def _sample(sid: str, segments: list, rng: random.Random, meta: dict) -> Sample:
    """Shuffle `segments` (in true order) under labels A, B, ...; the reference is the label order."""
    k = len(segments)
    shown = list(range(k))
    while shown == list(range(k)):
        rng.shuffle(shown)
    labels = string.ascii_uppercase[:k]
    label_of = {seg: labels[pos] for pos, seg in enumerate(shown)}  # true segment -> label shown
    reference = [label_of[i] for i in range(k)]
    return Sample(
        id=sid, messages=_prompt(k), reference=reference, verifier="order",
        videos=tuple(segments[i] for i in shown), meta={**meta, "shown": shown},
        target=f"<answer>{', '.join(reference)}</answer>",
    )


def _bars(rng: random.Random, k: int, seg_frames: int) -> list[BarSegment]:
    total = k * seg_frames
    low, high = round(rng.uniform(0.0, 0.3), 2), round(rng.uniform(0.7, 1.0), 2)
    x, color = rng.randint(2, SIZE - 18), rng.choice([(220, 40, 40), (40, 80, 220), (40, 170, 60)])
    return [BarSegment(j * seg_frames, seg_frames, total, low, high, x, color) for j in range(k)]


def _synthetic(split: str, size: int, seed: int, k: int, seg_frames: int, eval_size: int) -> list[Sample]:
    """Eval clips are drawn first from their own stream and never appear in train."""
    eval_rng = random.Random(f"frame_order-eval-{seed}")
    held = [(_bars(eval_rng, k, seg_frames), eval_rng) for _ in range(size if split == "eval" else eval_size)]
    if split == "eval":
        clips = [segs for segs, _ in held]
        rng = random.Random(f"frame_order-eval-shuffle-{seed}")
    else:
        seen = {tuple(segs) for segs, _ in held}
        rng, clips = random.Random(f"frame_order-train-{seed}"), []
        while len(clips) < size:
            segs = _bars(rng, k, seg_frames)
            if tuple(segs) not in seen:
                clips.append(segs)
    return [_sample(f"frame_order-{split}-{seed}-{i}", segs, rng, {"source": "synthetic"}) for i, segs in enumerate(clips)]


def find_videos(root: str | Path) -> list[Path]:
    """Video files under `root` (recursively), sorted; an error if there are none."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"video_dir {root}: not a directory")
    found = sorted(p for p in root.rglob("*") if p.suffix.lower() in VIDEO_EXTS and p.is_file())
    if not found:
        raise FileNotFoundError(f"video_dir {root}: no video files ({', '.join(VIDEO_EXTS)})")
    return found


def _held_out(path: Path, eval_frac: float) -> bool:
    return zlib.crc32(path.name.encode()) % 1000 < eval_frac * 1000


def _from_dir(split: str, size: int, seed: int, k: int, seg_frames: int, video_dir: str,
              eval_frac: float, max_pixels: int | None) -> list[Sample]:
    videos = [p for p in find_videos(video_dir) if _held_out(p, eval_frac) == (split == "eval")]
    if not videos:
        raise ValueError(f"video_dir {video_dir}: no videos fall in split {split!r} (holdout_frac={eval_frac})")
    rng = random.Random(f"frame_order-dir-{split}-{seed}")
    durations: dict = {}
    out = []
    for i in range(size):
        path = videos[i % len(videos)]
        if path not in durations:  # once per file: checks it decodes, and gives its length
            durations[path] = load_video(path, nframes=2, max_pixels=64 * 64)[1]["duration"]
        d = durations[path]
        cut = [d * j / k for j in range(k + 1)]
        segs = [VideoRef(str(path), nframes=seg_frames, max_pixels=max_pixels, start=cut[j], end=cut[j + 1])
                for j in range(k)]
        out.append(_sample(f"frame_order-{path.stem}-{split}-{seed}-{i}", segs, rng,
                           {"source": str(path), "cuts": cut}))
    return out


def build(split: str, size: int, seed: int, k: int = 3, seg_frames: int = 2, video_dir: str | None = None,
          holdout_frac: float | None = None, max_pixels: int | None = None, eval_size: int = 256,
          eval_frac: float | None = None, prompt_template: str | None = None,
          system_prompt: str | None = None) -> list[Sample]:
    """Samples for "train" or "eval" (synthetic unless `video_dir` is given)."""
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    if not 2 <= k <= 26:
        raise ValueError(f"k must be between 2 and 26 segments, got {k}")
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before any video is read
    if video_dir is None:
        out = _synthetic(split, size, seed, k, seg_frames, eval_size)
    else:
        holdout = renamed("frame_order", "holdout_frac", holdout_frac, "eval_frac", eval_frac)  # old name: eval_frac
        out = _from_dir(split, size, seed, k, seg_frames, video_dir, 0.2 if holdout is None else holdout, max_pixels)
    if spec.text is None and spec.system is None:
        return out
    messages = task_messages(spec, _prompt(k), fields(k))  # the same for every sample
    return [dataclasses.replace(s, messages=messages) for s in out]
