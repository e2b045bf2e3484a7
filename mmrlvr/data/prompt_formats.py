"""Which answer format a verifier reads, and whether the user's wording asks for it.

Checked before any model loads: a `prompt_template` file, or the first rows' `prompt` column,
that never asks for what the scoring verifiers parse would score every completion 0. The
verifiers are the configured `rewards:`/`eval.verifiers`, else each sample's own (a task's
`VERIFIERS`: `count` for counting, `choice` for marked_cell, `tiou` for temporal_grounding, ...).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable

# verifier -> tags it needs, each exactly (count reads a lone <answer>N</answer>; format checks both)
EXACT_TAGS = {"count": ("<answer>",), "format": ("<think>", "<answer>")}
# verifiers that read the final answer through verifiers.extract.final_answer: the last
# <answer>...</answer>, else the last \boxed{...}, else an "answer is ..." phrase
EXTRACTING = ("choice", "math", "number", "exact", "iou", "boxes", "tiou", "order")
MARKERS = ("<answer>", "\\boxed", "answer is", "answer:")
FIRST_ROWS = 5  # rows of a `prompt` column looked at up front


def missing_formats(text: str, verifiers: Iterable[str]) -> list[str]:
    """'verifier X needs <tag>' for each verifier whose answer format `text` never asks for."""
    low, out = text.lower(), []
    for v in dict.fromkeys(verifiers):
        out += [f"verifier {v!r} needs {tag}" for tag in EXACT_TAGS.get(v, ()) if tag not in low]
        if v in EXTRACTING and not any(m in low for m in MARKERS):
            out.append(f"verifier {v!r} needs <answer> (or \\boxed{{}}, or 'answer is')")
    return out


def verifiers_in_use(rewards: Iterable[str], eval_verifiers: Iterable[str], task_verifiers: Iterable[str]) -> list[str]:
    """The verifiers that will score completions: configured ones, else each sample's own."""
    train = list(rewards) or list(task_verifiers)
    return list(dict.fromkeys(train + (list(eval_verifiers) or train)))


def first_prompts(data: str, names: Iterable[str], n: int = FIRST_ROWS) -> list[tuple[int, str, str]]:
    """(row, column, prompt text) of the first `n` rows of a local JSONL/JSON/CSV file whose prompt column
    (the first of `names` present) is non-empty; [] for anything else (hub names, parquet)."""
    path, names = Path(data).expanduser(), list(names)
    if not path.is_file():
        return []
    suffix, rows = path.suffix.lower(), []
    try:
        if suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(line) for _, line in zip(range(n), (x for x in f if x.strip()))]
        elif suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as f:
                rows = [r for _, r in zip(range(n), csv.DictReader(f))]
        elif suffix == ".json":
            loaded = json.loads(path.read_text(encoding="utf-8"))
            rows = loaded[:n] if isinstance(loaded, list) else []
    except (ValueError, UnicodeDecodeError):
        return []  # the row readers name a broken file with its line
    out = []
    for i, row in enumerate(rows):
        name = next((k for k in names if isinstance(row, dict) and k in row), None)
        if name is not None and isinstance(row[name], str) and row[name].strip():
            out.append((i, name, row[name]))
    return out


def format_problems(args: dict, module, rewards: list[str], eval_verifiers: list[str]) -> list[tuple[str, object, str]]:
    """(config key, value, why) for a template file, and for the first row of `data`/`eval_data` whose
    `prompt` column, that asks for no answer format a scoring verifier reads."""
    from mmrlvr.data.prompts import TEMPLATES, instruction, prompt_spec

    own = getattr(module, "VERIFIERS", ()) or ([args["verifier"]] if isinstance(args.get("verifier"), str) else [])
    used = verifiers_in_use(rewards, eval_verifiers, own)  # generic: task.args.verifier scores its rows
    out: list[tuple[str, object, str]] = []
    path, system = args.get("prompt_template"), args.get("system_prompt")
    if system is not None and not isinstance(system, str):
        out.append(("task.args.system_prompt", system, "expected text (a system turn before the user turn)"))
    if path is not None:
        try:
            text = prompt_spec("answer", path).text
            if "answer_format" in text:  # the field renders the task's instruction (empty under template=plain)
                text += " " + instruction(args.get("template", "answer") if args.get("template") in TEMPLATES else "answer")
            needs = missing_formats(text, used)
        except ValueError as exc:
            out.append(("task.args.prompt_template", path, str(exc).split(": ", 1)[-1]))
        else:
            if needs:
                out.append(("task.args.prompt_template", path, f"a template that asks for the answer format: {'; '.join(needs)}"))
    cols = args.get("columns") if isinstance(args.get("columns"), dict) else {}
    names = cols.get("prompt") or (getattr(module, "COLUMNS", None) or {}).get("prompt") or ["prompt"]
    for key in ("data", "eval_data"):
        if not isinstance(args.get(key), str):
            continue
        for row, column, text in first_prompts(args[key], [names] if isinstance(names, str) else names):
            needs = missing_formats(text, used)
            if needs:
                out.append((f"task.args.{key}", args[key], f"row {row}, column {column!r} (the prompt) asks for no answer format: {'; '.join(needs)}"))
                break  # the first such row names the problem
    return out
