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
from mmrlvr.data.prompts import prompt_spec, task_messages
from mmrlvr.tasks._policy import BadRow, renamed, rows_to_samples
from mmrlvr.tasks._rows import mapping, read_mapped_rows
from mmrlvr.types import Sample

MEDIA = ("video",)  # the media its samples carry: `mmrlvr plan` sizes prompts by them

VERIFIERS = ('choice',)  # what its samples are scored by (each sample's own verifier)

VIDEO_EXTS = (".mp4", ".avi", ".webm", ".mkv", ".mov")
LETTERS = "ABCDE"
ANSWER_FORMAT = "Answer with the option's letter as <answer>X</answer>."
DEFAULT_ANNOTATIONS = str(Path(__file__).resolve().parents[1].parent / "shared" / "data" / "video_qa_nextqa" / "val_temporal_sample.jsonl")


COLUMNS = {
    "video": ["video"], "question": ["question"], "answer": ["answer"],
    **{f"a{i}": [f"a{i}"] for i in range(5)},
    "type": ["type"], "id": ["qid"], "prompt": ["prompt"],  # optional
}
REQUIRED = ("video", "question", "answer", *[f"a{i}" for i in range(5)])


def index_videos(video_dir: str | Path) -> dict[str, Path]:
    """{file stem: path} of every video under `video_dir`."""
    root = Path(video_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"video_dir {root}: not a directory")
    return {p.stem: p for p in sorted(root.rglob("*")) if p.suffix.lower() in VIDEO_EXTS}


def _held_out(video_id: str, eval_frac: float) -> bool:
    return zlib.crc32(video_id.encode()) % 1000 < eval_frac * 1000


def teacher_problem(args: dict, model_type: str | None = None) -> str:
    """These rows carry references but no teacher completions: a warm start has nothing to imitate."""
    return "this task's rows have no teacher completions; set warm_start.steps=0 (or warm_start.checkpoint)"


def build(split: str, size: int, seed: int, video_dir: str | None = None, data: str | None = None,
          nframes: int = 16, max_pixels: int | None = None, holdout_frac: float | None = None,
          max_bad_frac: float | None = None, skip_missing: bool = False, annotations: str | None = None,
          eval_frac: float | None = None, prompt_template: str | None = None,
          system_prompt: str | None = None, columns: dict | None = None) -> list[Sample]:
    """Up to `size` questions of the split whose videos are in `video_dir`.

    A bad row (missing video, answer not an index 0-4) is skipped and reported, as image rows are,
    up to `max_bad_frac` (see tasks/_policy.py); with `skip_missing`, rows whose video is not
    under `video_dir` (a partial download) are left out without counting as bad.
    `annotations` and `eval_frac` are the deprecated names of `data` and `holdout_frac`.
    A row's `prompt` column, else `prompt_template` (fields: question, options, options_text,
    answer_format, type), replaces the question text. `columns` maps the fields (video, question,
    answer, a0-a4, type, id, prompt) to the file's own column names, as the image tasks' does.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"unknown split {split!r}; known: train, eval")
    spec = prompt_spec("answer", prompt_template, system_prompt)  # validate before any row is read
    data = renamed("nextqa", "data", data, "annotations", annotations) or DEFAULT_ANNOTATIONS
    holdout = renamed("nextqa", "holdout_frac", holdout_frac, "eval_frac", eval_frac)
    holdout = 0.2 if holdout is None else holdout
    if video_dir is None:
        raise ValueError("nextqa needs task.args.video_dir: the NExT-QA videos are not shipped with the annotations")
    videos = index_videos(video_dir)
    rows = read_mapped_rows(data, mapping(COLUMNS, columns), REQUIRED, must_have=list(columns or {}))
    if skip_missing:
        rows = [(n, r) for n, r in rows if str(r["video"]) in videos]

    def make(n: int, row: dict) -> Sample:
        vid = str(row["video"])
        if vid not in videos:
            raise BadRow(f"video {vid!r} not found under {video_dir} (task.args.skip_missing: true leaves out "
                         "rows whose video is absent)")
        try:
            answer = int(row["answer"])
        except (TypeError, ValueError):
            answer = -1
        if not 0 <= answer < 5:
            raise BadRow(f"answer {row['answer']!r} is not an option index 0-4")
        options = [str(row[f"a{i}"]) for i in range(5)]
        lines = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
        text = f"{row['question'].strip()}?\n{lines}\n{ANSWER_FORMAT}"
        fields = {"question": f"{row['question'].strip()}?", "options": options, "options_text": lines,
                  "answer_format": ANSWER_FORMAT, "type": row.get("type")}
        default = ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]},)
        return Sample(
            id=f"nextqa-{row.get('id', n)}-{vid}",
            messages=task_messages(spec, default, fields, row.get("prompt")),
            reference=LETTERS[answer], verifier="choice",
            videos=(VideoRef(str(videos[vid]), nframes=nframes, max_pixels=max_pixels),),
            meta={"options": options, "type": row.get("type"), "source": f"{data}:{n}"},
        )

    out = rows_to_samples(data, rows, make, lambda r: _held_out(str(r["video"]), holdout) == (split == "eval"),
                          size, max_bad_frac)
    if not out:
        raise ValueError(f"{data}: no rows for split {split!r} with videos under {video_dir}")
    return out
