"""Temporal grounding: "when does <event> happen?" -> `[start, end]` in seconds, scored by `tiou`.

Rows (JSONL): `video` (a path, relative to `video_dir` or the file), `query` (or `sentence`, as
in Charades-STA), `timestamp` (`[start, end]` seconds). Frames are sampled at `fps` (default 2,
capped by `max_frames`), and the sampled fps reaches the processor, so the model's temporal
position ids are in real seconds (`second_per_grid_ts`): the answer is grounded in the clock.
Rows are split into train and eval by a hash of the video path (whole videos held out).
"""

from __future__ import annotations

import zlib
from pathlib import Path

from mmrlvr.data.media import VideoRef
from mmrlvr.tasks.nextqa import read_rows
from mmrlvr.types import Sample

QUESTION = ("When does this happen in the video: \"{query}\"? Answer with the start and end time in "
            "seconds as <answer>[start, end]</answer>.")


def build(split: str, size: int, seed: int, annotations: str | None = None, video_dir: str | None = None,
          fps: float = 2.0, max_frames: int = 32, max_pixels: int | None = None,
          eval_frac: float = 0.2) -> list[Sample]:
    """Up to `size` rows of the split; a missing video or a bad segment names file:line."""
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    if annotations is None:
        raise ValueError("temporal_grounding needs task.args.annotations (JSONL: video, query, timestamp)")
    root = Path(video_dir) if video_dir else Path(annotations).parent
    out = []
    for n, row in read_rows(annotations, ("video", "timestamp")):
        query = row.get("query", row.get("sentence"))
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"{annotations}:{n}: missing field 'query' (or 'sentence')")
        seg = row["timestamp"]
        if not (isinstance(seg, (list, tuple)) and len(seg) == 2 and all(isinstance(x, (int, float)) for x in seg)
                and 0 <= seg[0] < seg[1] < float("inf")):  # [0, Infinity] could never score
            raise ValueError(f"{annotations}:{n}: timestamp must be finite [start, end] seconds with start < end, got {seg!r}")
        path = Path(row["video"]) if Path(row["video"]).is_absolute() else root / row["video"]
        if (zlib.crc32(str(row["video"]).encode()) % 1000 < eval_frac * 1000) != (split == "eval"):
            continue
        if not path.is_file():
            raise FileNotFoundError(f"{annotations}:{n}: video {path} not found")
        out.append(Sample(
            id=f"grounding-{n}-{path.stem}",
            messages=({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION.format(query=query.strip())}]},),
            reference=[float(seg[0]), float(seg[1])], verifier="tiou",
            videos=(VideoRef(str(path), fps=fps, max_frames=max_frames, max_pixels=max_pixels),),
            meta={"source": f"{annotations}:{n}"},
        ))
        if len(out) == size:
            break
    if not out:
        raise ValueError(f"{annotations}: no rows for split {split!r}")
    return out
