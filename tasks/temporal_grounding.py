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

from mmrlvr.data.frame_times import container_duration
from mmrlvr.data.io import row_file_exists
from mmrlvr.data.media import VideoRef
from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.tasks._policy import BadRow, renamed, rows_to_samples
from mmrlvr.tasks._rows import mapping, read_mapped_rows
from mmrlvr.types import Sample

MEDIA = ("video",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('tiou',)  # what its samples are scored by (each sample's own verifier)

ANSWER_FORMAT = "Answer with the start and end time in seconds as <answer>[start, end]</answer>."
QUESTION = "When does this happen in the video: \"{query}\"? " + ANSWER_FORMAT
COLUMNS = {
    "video": ["video"], "query": ["query", "sentence"], "timestamp": ["timestamp"],
    "prompt": ["prompt"],  # optional: the whole user text
}
REQUIRED = ("video", "timestamp")  # a row without a query is a bad row, skipped under max_bad_frac
END_SLACK_S = 0.1
"""A segment may end this far after the clip's declared duration (annotations rounded to 0.1 s)."""


def teacher_problem(args: dict, model_type: str | None = None) -> str:
    """These rows carry references but no teacher completions: a warm start has nothing to imitate."""
    return "this task's rows have no teacher completions; set warm_start.steps=0 (or warm_start.checkpoint)"


def build(split: str, size: int, seed: int, data: str | None = None, video_dir: str | None = None,
          fps: float = 2.0, max_frames: int = 32, max_pixels: int | None = None, holdout_frac: float | None = None,
          max_bad_frac: float | None = None, annotations: str | None = None,
          eval_frac: float | None = None, prompt_template: str | None = None,
          system_prompt: str | None = None, columns: dict | None = None) -> list[Sample]:
    """Up to `size` rows of the split; a missing video or a bad segment (one ending after the
    clip's header duration, which could never score) is a bad row (file, row), skipped and
    reported up to `max_bad_frac` (tasks/_policy.py). `annotations` and `eval_frac` are the
    deprecated names of `data` and `holdout_frac`. A row's `prompt` column, else
    `prompt_template` (fields: query, question, answer_format), replaces the question text.
    `columns` maps the fields (video, query, timestamp, prompt) to the file's own column names."""
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before any row is read
    data = renamed("temporal_grounding", "data", data, "annotations", annotations)
    holdout = renamed("temporal_grounding", "holdout_frac", holdout_frac, "eval_frac", eval_frac)
    holdout = 0.2 if holdout is None else holdout
    if data is None:
        raise ValueError("temporal_grounding needs task.args.data (JSONL: video, query, timestamp)")
    root = Path(video_dir) if video_dir else Path(data).parent
    cols = mapping(COLUMNS, columns)
    rows = read_mapped_rows(data, cols, REQUIRED, must_have=["query", *(columns or {})])
    durations: dict = {}  # path -> seconds from the header (or None), read once per video

    def make(n: int, row: dict) -> Sample:
        query = row.get("query")
        if not isinstance(query, str) or not query.strip():
            raise BadRow(f"missing field {cols['query'][0]!r}" + "".join(f" (or {c!r})" for c in cols["query"][1:]))
        seg = row["timestamp"]
        if not (isinstance(seg, (list, tuple)) and len(seg) == 2 and all(isinstance(x, (int, float)) for x in seg)
                and 0 <= seg[0] < seg[1] < float("inf")):  # [0, Infinity] could never score
            raise BadRow(f"timestamp must be finite [start, end] seconds with start < end, got {seg!r}")
        path = Path(row["video"]) if Path(row["video"]).is_absolute() else root / row["video"]
        if not row_file_exists(path, "field 'video'"):
            raise BadRow(f"video {str(path)[:300]} not found")
        if path not in durations:
            durations[path] = container_duration(str(path))
        if durations[path] is not None and seg[1] > durations[path] + END_SLACK_S:  # unknown length: kept
            raise BadRow(f"field 'timestamp': segment {list(seg)} ends after the clip's {durations[path]:.2f} s ({path})")
        return Sample(
            id=f"grounding-{n}-{path.stem}",
            messages=task_messages(spec, ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": QUESTION.format(query=query.strip())}]},),
                                   {"query": query.strip(), "question": f"When does this happen in the video: \"{query.strip()}\"?",
                                    "answer_format": ANSWER_FORMAT}, row.get("prompt")),
            reference=[float(seg[0]), float(seg[1])], verifier="tiou",
            videos=(VideoRef(str(path), fps=fps, max_frames=max_frames, max_pixels=max_pixels),),
            meta={"source": f"{data}:{n}"},
        )

    def in_split(row: dict) -> bool:
        return (zlib.crc32(str(row["video"]).encode()) % 1000 < holdout * 1000) == (split == "eval")

    out = rows_to_samples(data, rows, make, in_split, size, max_bad_frac)
    if not out:
        raise ValueError(f"{data}: no rows for split {split!r}")
    return out
