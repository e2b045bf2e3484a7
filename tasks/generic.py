"""Any rows with a prompt or question, images and/or videos and a reference, scored by the verifier you name.

For data shapes no task module covers: each row's `prompt` (the whole user text, as in TRL) or
`question` (plus the `template` instruction, or your `prompt_template`), its images (`<image>`
placeholders place them, as in the image tasks) and videos (paths; before the text), and its
`answer` as the reference, mapped by `columns`. Every row is scored by `verifier` (a registered
name: `mmrlvr verifiers`), or by the config's `rewards:` (then `verifier` may be left out); every
other column reaches the verifiers in `sample.meta["columns"]`.
A reference that is a list (a box, a segment) stays a list; a number becomes its text.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Sequence

from mmrlvr.data.heldout import split_positions
from mmrlvr.data.io import BadRow, DataError, Row, bad_frac, build_samples, read_rows, row_file_exists
from mmrlvr.data.prompts import PromptSpec, instruction, prompt_spec, user_messages
from mmrlvr.data.qa import extra_columns, split_extra
from mmrlvr.data.video import VideoRef
from mmrlvr.types import Sample

MEDIA = ("image", "video")  # a row may hold images or video, by its columns (`media_for` says which a config plans)


def media_for(args: dict) -> tuple[str, ...]:
    """The media `mmrlvr plan` sizes for these task arguments, without reading the rows: video when the
    config maps a video column or names a video folder, images when it maps an image column or maps
    neither (the rows of a file with both are planned at the larger)."""
    cols = args.get("columns") if isinstance(args.get("columns"), dict) else {}
    video = bool(cols.get("video") or args.get("video_dir"))
    return tuple(k for k, on in (("image", bool(cols.get("image")) or not video), ("video", video)) if on)
VERIFIERS = ()  # none of its own: task.args.verifier (or the config's rewards:) scores every row
REQUIRED_ARGS = ("data",)  # listed as required by `mmrlvr tasks`; arg_problems names it
ARG_NOTES = {"verifier": "None (required unless rewards: score the rows)"}  # what `mmrlvr tasks generic` shows

COLUMNS = {
    "prompt": ["prompt"],
    "question": ["question", "problem", "query"],
    "image": ["image", "images", "image_path"],
    "video": ["video", "videos", "video_path"],
    "answer": ["answer", "solution", "reference", "label"],
    "id": ["id"],
}


def arg_problems(args: dict, rewards: Sequence[str] = ()) -> list[tuple[str, object, str]]:
    """(config key, value, why) for settings no row can fix, named before any row is read.

    `rewards`: the config's reward terms (and `mmrlvr.run`'s reward callables); when there are
    any they score the rows, so `verifier` may be left out (one that is given must exist)."""
    from mmrlvr.verifiers.base import available_verifiers

    out: list[tuple[str, object, str]] = []
    if not isinstance(args.get("data"), str) or not args["data"].strip():
        out.append(("task.args.data", args.get("data"), "the rows file (JSONL, JSON, CSV, Parquet, a saved dataset "
                    "or a hub name), or train_data= in mmrlvr.run"))
    verifier, known = args.get("verifier"), available_verifiers()
    if verifier is None and not rewards:
        out.append(("task.args.verifier", verifier, "a registered verifier to score every row, or reward terms in "
                    f"rewards: (rewards= in mmrlvr.run); known: {', '.join(known)}"))
    elif verifier is not None and verifier not in known:
        out.append(("task.args.verifier", verifier, f"a registered verifier; known: {', '.join(known)}"))
    return out


def teacher_problem(args: dict, model_type: str | None = None) -> str | None:
    """References are teacher answers under the answer template; under `think` they have no reasoning."""
    if args.get("template") == "think":
        return ("real rows have no teacher reasoning for template 'think'; set warm_start.steps=0, "
                "or warm-start with template 'answer' (warm_start.checkpoint)")
    return None


def _reference(answer):
    """The row's reference: text stripped, a number as text, a list (box, segment) as is."""
    if isinstance(answer, bool) or answer is None or isinstance(answer, dict):
        raise BadRow("answer is missing" if answer is None else f"answer {str(answer)[:40]!r} is not a reference")
    if isinstance(answer, float) and not math.isfinite(answer):
        raise BadRow(f"field 'answer' is {answer}, not a usable reference")
    if isinstance(answer, (int, float)):
        return str(answer)
    if isinstance(answer, str):
        if not answer.strip():
            raise BadRow("answer is missing")
        return answer.strip()
    if isinstance(answer, list) and answer:
        return answer
    raise BadRow(f"answer {str(answer)[:40]!r} is not a reference")


def _videos(cell, root: str | None, nframes: int, max_pixels: int | None) -> tuple:
    """VideoRefs of a row's video cell (a path or a list of paths); a missing file is a bad row."""
    if cell is None:
        return ()
    out = []
    for item in cell if isinstance(cell, list) else [cell]:
        if not isinstance(item, str) or not item.strip():
            raise BadRow(f"field 'video': expected a path, got {str(item)[:40]!r}")
        path = Path(os.path.expanduser(item))
        if not path.is_absolute() and root is not None:
            path = Path(root) / path
        if not row_file_exists(path, "field 'video'"):
            hint = "" if Path(os.path.expanduser(item)).is_absolute() else \
                " (relative paths start from task.args.video_dir, by default the data file's folder)"
            raise BadRow(f"video file not found: {path}{hint}")
        out.append(VideoRef(str(path), nframes=nframes, max_pixels=max_pixels))
    return tuple(out)


def generic_sample(row: Row, source: str, spec: PromptSpec, verifier: str, video_dir: str | None,
                   nframes: int, max_pixels: int | None) -> Sample:
    """One row as a sample: its prompt or question, media, reference and the configured verifier."""
    fields, columns = split_extra(row.fields)
    prompt, question = fields.get("prompt"), fields.get("question")
    has_prompt = isinstance(prompt, str) and prompt.strip()
    if not has_prompt and not (isinstance(question, str) and question.strip()):
        raise BadRow("neither a prompt nor a question")
    reference = _reference(fields.get("answer"))
    videos = _videos(fields.get("video"), video_dir, nframes, max_pixels)
    suffix = instruction(spec.template)
    text = prompt.strip() if has_prompt else question.strip()
    render = {**columns, "question": text, "answer_format": suffix, "columns": columns}
    messages, images = user_messages(spec, text, row.images, suffix, render, prompt if has_prompt else None)
    if videos:  # videos go first in the user turn, before its images and text
        *head, user = messages
        messages = (*head, {**user, "content": [{"type": "video"} for _ in videos] + list(user["content"])})
    answer = reference if isinstance(reference, str) else json.dumps(reference)
    rid = fields.get("id")
    meta = {"row": row.index, "source": source, **({"columns": columns} if columns else {})}
    return Sample(id=f"{Path(source).name}:{rid if rid is not None else row.index}", messages=messages,
                  reference=reference, verifier=verifier or "", images=images, videos=videos, meta=meta,
                  target=f"<answer>{answer}</answer>" if spec.template != "think" else None)


def build(split: str, size: int, seed: int, data: str | None = None, verifier: str | None = None,
          eval_data: str | None = None, columns: dict | None = None, image_root: str | None = None,
          video_dir: str | None = None, nframes: int = 8, max_pixels: int | None = None,
          max_bad_frac: float | None = None, template: str = "answer", holdout_frac: float = 0.1,
          cache_dir: str | None = None, prompt_template: str | None = None,
          system_prompt: str | None = None) -> list[Sample]:
    """Samples of a split: the rows of `data` (a seeded held-out slice, or `eval_data`, for eval)."""
    # no verifier: the config's rewards: score the rows (validation has required one or the other)
    problems = arg_problems({"data": data, "verifier": verifier}, rewards=["rewards:"] if verifier is None else [])
    if problems:
        key, value, why = problems[0]
        raise DataError(f"{key}={value!r}: {why}")  # the validator's line, when build is called directly
    spec = prompt_spec(template, prompt_template, system_prompt)  # validate before any row is read
    path = eval_data if (split == "eval" and eval_data) else data
    mapping = extra_columns(path, {**COLUMNS, **(columns or {})}, cache_dir)
    required = ("answer", ("question", "prompt"), *(columns or {}))  # every missing one named in one line
    source, ds, rows = read_rows(path, mapping, required=required, image_root=image_root,
                                 cache_dir=cache_dir, images_optional=True)
    if video_dir is None and Path(path).exists():
        video_dir = str(Path(path).parent if Path(path).is_file() else Path(path))
    keep = split_positions(len(rows), split, size, seed, eval_data=bool(eval_data), holdout_frac=holdout_frac)
    return build_samples(source, rows, lambda r: generic_sample(r, source, spec, verifier, video_dir, nframes, max_pixels),
                         bad_frac(max_bad_frac, len(rows)), keep)
