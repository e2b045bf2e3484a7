"""NExT-QA-style temporal multiple choice: "what does the girl do after turning around?".

Rows (JSONL, NExT-QA's own field names): `video` (an id), `question`, `a0`..`a4`, `answer` (the
index of the right option), `type` (TN next, TP previous, TC concurrent, ...). The videos are
not shipped with the annotations: pass `video_dir`, searched recursively for `<video>.<ext>`
(NExT-QA keeps them in sub-folders). Scored by `choice` (letter A-E or the option's text).
Whole videos are held out for eval (by a hash of the id), so no clip is in both splits.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from mmrlvr.data.media import VideoRef
from mmrlvr.jsonl import iter_jsonl
from mmrlvr.types import Sample

VIDEO_EXTS = (".mp4", ".avi", ".webm", ".mkv", ".mov")
LETTERS = "ABCDE"
DEFAULT_ANNOTATIONS = str(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "video_qa_nextqa" / "val_temporal_sample.jsonl")


def read_rows(path: str | Path, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line number, row) of a JSONL (or, by suffix, CSV) file; a bad line or a missing field names
    file:line. NExT-QA ships CSV (`val.csv`); the shared sample is JSONL with the same fields."""
    rows = []
    if str(path).lower().endswith(".csv"):
        import csv

        with open(path, newline="") as f:
            for n, row in enumerate(csv.DictReader(f), 2):  # line 1 is the header
                missing = [k for k in required if not row.get(k)]
                if missing:
                    raise ValueError(f"{path}:{n}: missing field {missing[0]!r}")
                rows.append((n, row))
        return rows
    for n, row in iter_jsonl(path):
        missing = [k for k in required if k not in row] if isinstance(row, dict) else ["(not an object)"]
        if missing:
            raise ValueError(f"{path}:{n}: missing field {missing[0]!r}")
        rows.append((n, row))
    return rows


def index_videos(video_dir: str | Path) -> dict[str, Path]:
    """{file stem: path} of every video under `video_dir`."""
    root = Path(video_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"video_dir {root}: not a directory")
    return {p.stem: p for p in sorted(root.rglob("*")) if p.suffix.lower() in VIDEO_EXTS}


def _held_out(video_id: str, eval_frac: float) -> bool:
    return zlib.crc32(video_id.encode()) % 1000 < eval_frac * 1000


def build(split: str, size: int, seed: int, video_dir: str | None = None, annotations: str = DEFAULT_ANNOTATIONS,
          nframes: int = 16, max_pixels: int | None = None, eval_frac: float = 0.2,
          skip_missing: bool = False) -> list[Sample]:
    """Up to `size` questions of the split whose videos are in `video_dir`.

    A row whose video is missing is an error naming the row (or, with `skip_missing`, skipped).
    """
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    if video_dir is None:
        raise ValueError("nextqa needs task.args.video_dir: the NExT-QA videos are not shipped with the annotations")
    videos = index_videos(video_dir)
    out = []
    for n, row in read_rows(annotations, ("video", "question", "answer", *[f"a{i}" for i in range(5)])):
        vid = str(row["video"])
        if _held_out(vid, eval_frac) != (split == "eval"):
            continue
        if vid not in videos:
            if skip_missing:
                continue
            raise FileNotFoundError(f"{annotations}:{n}: video {vid!r} not found under {video_dir}")
        answer = int(row["answer"])
        if not 0 <= answer < 5:
            raise ValueError(f"{annotations}:{n}: answer {row['answer']!r} is not an option index 0-4")
        options = [str(row[f"a{i}"]) for i in range(5)]
        lines = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
        text = f"{row['question'].strip()}?\n{lines}\nAnswer with the option's letter as <answer>X</answer>."
        out.append(Sample(
            id=f"nextqa-{row.get('qid', n)}-{vid}",
            messages=({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]},),
            reference=LETTERS[answer], verifier="choice",
            videos=(VideoRef(str(videos[vid]), nframes=nframes, max_pixels=max_pixels),),
            meta={"options": options, "type": row.get("type"), "source": f"{annotations}:{n}"},
        ))
        if len(out) == size:
            break
    if not out:
        raise ValueError(f"{annotations}: no rows for split {split!r} with videos under {video_dir}")
    return out
