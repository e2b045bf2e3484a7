"""Question-answer rows shared by the QA tasks (geometry, chart): options, letters, loading.

A row has a question (with optional image placeholders), an answer, optional options and images.
With options it is scored by `choice` (the options listed in the prompt as "(A) ..."); without,
by the task's free-form verifier (`math` for geometry, `number` or `exact` for charts).
"""

from __future__ import annotations

import math
from pathlib import Path

from typing import Callable

from mmrlvr.data.heldout import split_positions
from mmrlvr.data.io import EXTRA, BadRow, Row, bad_frac, build_samples, read_rows
from mmrlvr.data.prompts import PromptSpec, instruction, user_messages
from mmrlvr.types import Sample

LETTERS = "ABCDEFGHIJ"


def options_text(options: list) -> str:
    return "Choices: " + " ".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))


def choice_letter(answer: str, options: list) -> str:
    """The reference letter: a letter in range, or the text of one option; else a bad row."""
    ans = answer.strip().strip("()").strip()
    if len(ans) == 1 and ans.upper() in LETTERS[: len(options)]:
        return ans.upper()
    for i, opt in enumerate(options):
        if ans.casefold() == str(opt).strip().casefold():
            return LETTERS[i]
    raise BadRow(f"answer {answer[:40]!r} is not one of the {len(options)} options")


def option_list(cell) -> list[str]:
    """An `options` cell as a list of strings; a JSON list written as a string ('["a", "b"]', as CSV
    stores it) is read as that list. Anything else is a bad row: a plain string "ABCD" would
    otherwise become four one-letter options."""
    if cell is None:
        return []
    if isinstance(cell, str):
        import json

        text = cell.strip()
        if not text:
            return []
        try:
            cell = json.loads(text)
        except ValueError:
            cell = None
        if not isinstance(cell, list):
            raise BadRow(f"field 'options': expected a list, got the string {text[:40]!r}")
    if not isinstance(cell, (list, tuple)):
        raise BadRow(f"field 'options': expected a list, got {type(cell).__name__} {str(cell)[:40]!r}")
    out = []
    for o in cell:
        if o is None or isinstance(o, (list, dict)) or (isinstance(o, float) and not math.isfinite(o)):
            raise BadRow(f"field 'options': option {str(o)[:40]!r} is not a single value")
        out.append(str(o))
    return out




def extra_columns(spec: str, mapping: dict, cache_dir: str | None) -> dict:
    """`mapping` plus every column it does not claim (text, numbers, lists; not images or videos),
    so each row's other columns reach verifiers in `sample.meta["columns"]`, as TRL passes every
    column. A column of media no key claims is refused by `read_rows` (`mmrlvr.data.media_columns`)."""
    from mmrlvr.data.io import open_dataset
    from mmrlvr.data.media_columns import media_kind

    ds = open_dataset(spec, cache_dir=cache_dir)
    claimed = set()
    for want in mapping.values():  # the column each task field resolves to (its first present candidate)
        # a malformed mapping value (e.g. a number) is named by the column resolver, not here
        candidates = [want] if isinstance(want, str) else [c for c in want if isinstance(c, str)] if isinstance(want, (list, tuple)) else []
        claimed.update(next(([c] for c in candidates if c in ds.column_names), []))
    return {**mapping, **{EXTRA + c: c for c in ds.column_names if c not in claimed and media_kind(ds, c) is None}}


def split_extra(fields: dict) -> tuple[dict, dict]:
    """(task fields, {column: value} of the extra columns)."""
    return ({k: v for k, v in fields.items() if not k.startswith(EXTRA)},
            {k[len(EXTRA):]: v for k, v in fields.items() if k.startswith(EXTRA)})


def qa_sample(row: Row, source: str, template: str | PromptSpec, free_form: Callable[[str], str] = lambda a: "math",
              need_image: bool = True) -> Sample:
    """A MATH-V-style row (question, optional options, answer) as a choice or free-form sample."""
    question = row.fields.get("question")
    answer = row.fields.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise BadRow("question is missing")
    if isinstance(answer, list) and len(answer) == 1:  # ChartQA packagings store ["label"]
        answer = answer[0]
    if answer is None or (isinstance(answer, str) and not answer.strip()) or isinstance(answer, (list, dict)):
        raise BadRow("answer is missing" if answer in (None, "") else f"answer {str(answer)[:40]!r} is not a single value")
    if isinstance(answer, float) and not math.isfinite(answer):  # NaN or inf: nothing can ever match it
        raise BadRow(f"field 'answer' is {answer}, not a usable reference")
    answer = str(answer).strip()
    if need_image and not row.images:
        raise BadRow("the row has no image")
    options = option_list(row.fields.get("options"))
    if len(options) > len(LETTERS):
        raise BadRow(f"{len(options)} options; at most {len(LETTERS)}")
    spec = template if isinstance(template, PromptSpec) else PromptSpec(template)
    fields, columns = split_extra(row.fields)
    suffix = instruction(spec.template)
    if options:
        reference, verifier = choice_letter(answer, options), "choice"
        suffix = options_text(options) + ("\n" + suffix if suffix else "")
    else:
        reference, verifier = answer, free_form(answer)
    visible = {k: v for k, v in fields.items() if k not in ("answer", "prompt")}  # never the answer
    render = {**columns, **visible, "question": question, "options": options,
              "options_text": options_text(options) if options else "", "answer_format": instruction(spec.template),
              "columns": columns}
    messages, images = user_messages(spec, question, row.images, suffix, render, fields.get("prompt"))
    rid = row.fields.get("id")
    target = f"<answer>{reference}</answer>" if spec.template != "think" else None
    meta = {"options": options, "row": row.index, "source": source}
    if columns:
        meta["columns"] = columns
    return Sample(
        id=f"{Path(source).name}:{rid if rid is not None else row.index}", messages=messages, reference=reference,
        verifier=verifier, images=images, meta=meta, target=target,
    )


def load_real(split: str, size: int, seed: int, data: str, eval_data: str | None, columns: dict | None,
              image_root: str | None, max_bad_frac: float | None, template: str | PromptSpec, holdout_frac: float,
              cache_dir: str | None, defaults: dict, make: Callable) -> list[Sample]:
    """Shared by the QA tasks: read the split's file, map columns, build samples, hold out eval."""
    spec = eval_data if (split == "eval" and eval_data) else data
    mapping = extra_columns(spec, {**defaults, **(columns or {})}, cache_dir)
    # a QA row needs its image; a column the user mapped must exist (else every row would be bad)
    required = ("question", "answer", "image", *(columns or {}))
    source, _, rows = read_rows(spec, mapping, required=required, image_root=image_root,
                                cache_dir=cache_dir)
    keep = split_positions(len(rows), split, size, seed, eval_data=bool(eval_data), holdout_frac=holdout_frac)
    return build_samples(source, rows, lambda r: make(r, source, template), bad_frac(max_bad_frac, len(rows)), keep)


def teacher_problem(args: dict, model_type: str | None = None) -> str | None:
    """Real rows give teacher completions from their references, except under the `think` template
    (a reference has no reasoning to imitate): say so before the model loads."""
    if args.get("data") is not None and args.get("template") == "think":
        return ("real rows have no teacher reasoning for template 'think'; set warm_start.steps=0, "
                "or warm-start with template 'answer' (warm_start.checkpoint)")
    return None
