"""Decode a batch's media ahead of time, drop samples whose media are bad, count them.

`MediaStream` wraps the loop's prompt stream. `take(n)` returns the next n samples as decoded
copies (PIL images in `images`, frames in `videos`), decoded in a background thread while the
previous step generates. A sample whose image or video cannot be decoded is named (id and file)
in a warning, dropped from the batch and counted (`data/bad_media` in the metrics). Each such row
counts once, together with the rows its file lost at load, against `task.max_bad_frac` of the
file's rows (`mmrlvr.data.bad_rows`); past it the run stops with `BadMediaError` naming them.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

from mmrlvr.data.bad_rows import BadRows
from mmrlvr.data.io import DataError
from mmrlvr.data.media import MediaError, decode_video, load_image
from mmrlvr.types import Sample

log = logging.getLogger("mmrlvr.data")


class BadMediaError(DataError):
    """Too many rows were bad, the last of them for media that could not be decoded; the message
    says how many at load and at decode, and which."""


@dataclasses.dataclass(frozen=True)
class DecodedVideo:
    """A video decoded ahead of its batch; `decode_video` takes it back through `load()`."""

    frames: Any  # (T, H, W, 3) uint8
    meta: dict

    def load(self, max_frames: int | None = None, max_pixels: int | None = None):
        return self.frames, self.meta


def decode_sample(s: Sample, video_limits: dict | None = None) -> Sample:
    """A copy of `s` with decoded media (same `meta` dict); raises MediaError naming the file.

    Videos are decoded with the run's limits (`collate.video_limits(processor)`), exactly as
    `encode_prompts` would decode them; already-decoded arrays are left as they are.
    """
    images = tuple(load_image(ref) for ref in s.images)
    lim = video_limits or {}
    videos = tuple(
        DecodedVideo(*decode_video(v, max_frames=lim.get("max_frames"), max_pixels=lim.get("max_pixels")))
        if hasattr(v, "load") else v
        for v in s.videos
    )
    return dataclasses.replace(s, images=images, videos=videos)


def decode_samples(samples: Sequence[Sample], video_limits: dict | None = None) -> tuple[list[Sample], list[tuple[Sample, str]]]:
    """(decoded good samples, [(bad sample, reason)]) in the input order."""
    good, bad = [], []
    for s in samples:
        try:
            good.append(decode_sample(s, video_limits))
        except MediaError as exc:
            bad.append((s, str(exc)))
    return good, bad


class MediaStream:
    """A prompt stream whose batches arrive decoded, with bad-media samples dropped.

    It is itself a prompt source (`mmrlvr.data.sources.PromptSource`): feedback and state go to
    the wrapped source. The next batch is decoded ahead only for a source whose order feedback
    cannot change (`prefetchable`, e.g. `SeededStream`). `pop_bad()` returns and resets the number
    of samples dropped since the last call (the step's `data/bad_media`).
    """

    def __init__(self, stream, max_bad_frac: float | None = None, prefetch: bool = True, processor=None,
                 bad_rows: BadRows | None = None):
        from mmrlvr.data.collate import video_limits

        self.stream = stream
        # the count the loader began (`BadRows.of(train_set)`), else the source's own samples
        self.bad_rows = bad_rows or BadRows.of(getattr(stream, "samples", ()), max_bad_frac)
        self.video_limits = video_limits(processor) if processor is not None else {}
        self._bad_since = 0
        self._dropped: list[str] = []  # ids dropped for bad media, fed back as unscored next time
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mmrlvr-media") if prefetch else None
        self._ahead: tuple[int, int, int, Future] | None = None  # (pos, n, step, decoding of those samples)

    @property
    def pos(self) -> int:
        return self.stream.pos

    def feedback(self, step: int, sample_ids: list[str], rewards) -> None:
        """Feedback for the scored prompts, plus an all-NaN row for each prompt dropped for bad
        media since the last call (taken, never scored: it must still leave the source's flight)."""
        import torch

        dropped, self._dropped = self._dropped, []
        if dropped:
            r = torch.as_tensor(rewards, dtype=torch.float32)
            g = max(1, r.shape[1] if r.dim() == 2 else 1)
            r = r.reshape(len(sample_ids), g) if r.numel() else torch.zeros(0, g)
            sample_ids = [*sample_ids, *dropped]
            rewards = torch.cat([r, torch.full((len(dropped), g), float("nan"))])
        self.stream.feedback(step, sample_ids, rewards)

    def metrics(self) -> dict[str, float]:
        """The wrapped source's own metrics (replay's queue), if it has any."""
        return self.stream.metrics() if hasattr(self.stream, "metrics") else {}

    def state_dict(self) -> dict:
        return self.stream.state_dict()

    def load_state_dict(self, d: dict) -> None:
        self._ahead = None
        self.stream.load_state_dict(d)

    def take(self, n: int, step: int = 0) -> list[Sample]:
        """The next n samples decoded, minus bad ones (at least one sample unless it raises)."""
        good: list[Sample] = []
        while not good:
            good = self._take_once(n, step)
        return good

    def _take_once(self, n: int, step: int) -> list[Sample]:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[:3] == (self.stream.pos, n, step):
            good, bad = ahead[3].result()
            self.stream.take(n, step)  # advance exactly as far as the prefetch looked
        else:
            good, bad = decode_samples(self.stream.take(n, step), self.video_limits)
        if self._pool is not None and getattr(self.stream, "prefetchable", False):
            # decode the next step's batch while this one is used (a source may vary by step: demos)
            nxt = copy.copy(self.stream).take(n, step + 1)
            self._ahead = (self.stream.pos, n, step + 1, self._pool.submit(decode_samples, nxt, self.video_limits))
        self._count(n, bad)
        return good

    def _count(self, n: int, bad: list[tuple[Sample, str]]) -> None:
        for s, reason in bad:  # the whole batch is counted before the limit is checked
            self._dropped.append(s.id)
            log.warning("bad media in sample %s, dropped from the batch: %s", s.id, reason)
            self.bad_rows.record(s.id, f"{s.id}: {reason}")
        self._bad_since += len(bad)
        try:
            self.bad_rows.check()
        except DataError as exc:
            raise BadMediaError(str(exc)) from None

    def pop_bad(self) -> int:
        out, self._bad_since = self._bad_since, 0
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
