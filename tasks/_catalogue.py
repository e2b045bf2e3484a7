"""What each task takes: build() arguments with defaults, and the column keys of its data rows.

Read by `mmrlvr tasks` (to list them) and by `mmrlvr.checks.validate` (to name an unknown key inside
`task.args` or `task.args.columns` together with the known ones, before the model loads).
"""

from __future__ import annotations

import inspect
import pkgutil
import re

FIXED = ("split", "size", "seed")  # passed by the loop, never by task.args
FROM_CONFIG = {"eval_size": "task.eval_size", "model_type": "the model's config"}  # filled in by the loop
DEPRECATED = {"annotations": "data", "eval_frac": "holdout_frac"}  # old video-task names -> one set


def task_names() -> list[str]:
    import mmrlvr.tasks as package

    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def arguments(module) -> dict:
    """{argument: default} of a task's build(), `inspect.Parameter.empty` for required ones (also
    those a task lists in `REQUIRED_ARGS`: defaulting to None so that the task, not a TypeError,
    names them when missing)."""
    params = inspect.signature(module.build).parameters
    required = set(getattr(module, "REQUIRED_ARGS", ()))
    return {n: inspect.Parameter.empty if n in required else p.default for n, p in params.items()
            if n not in FIXED and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def media(module, args: dict | None = None) -> tuple[str, ...]:
    """The media a task's samples may carry ("image", "video"), from the task's own `MEDIA`: the memory
    plan sizes a prompt's visual tokens by it, so a new video task is never planned as an image one.
    A task whose rows may hold either says which its arguments select (`media_for(args)`). A task of a
    user's package that declares none is taken for an image task."""
    declared = getattr(module, "MEDIA", ("image",))
    chooser = getattr(module, "media_for", None)
    if args is not None and callable(chooser):
        declared = [m for m in chooser(args) if m in declared] or declared
    return tuple(m for m in ("image", "video") if m in declared)


def column_keys(module) -> dict:
    """{task field: candidate columns} a task's rows are read through (empty: no data rows)."""
    return dict(getattr(module, "COLUMNS", {}) or {})


_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)[.?!](?=\s|$)")  # not in "C...;", "e.g.", '"shapes?" over', "0.5"


def summary(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, joined across its lines: a listing
    line never stops mid-sentence at a line break (a paragraph with no sentence end is whole)."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph[: end.end()] if end else paragraph


def describe(module, name: str) -> str:
    lines = [f"{name}: {summary(module.__doc__)}"]
    for arg, default in arguments(module).items():
        if arg in DEPRECATED:
            continue
        shown = "(required)" if default is inspect.Parameter.empty else repr(default)
        if arg == "max_bad_frac" and default is None:
            shown = "None (1% of the rows, at least one row)"
        if arg in FROM_CONFIG:
            shown = f"from {FROM_CONFIG[arg]}"
        shown = getattr(module, "ARG_NOTES", {}).get(arg, shown)  # a default that needs a word (generic's verifier)
        lines.append(f"  {arg} = {shown}")
    cols = column_keys(module)
    if cols:
        lines.append("  columns: " + "; ".join(f"{k} <- {', '.join(v) if isinstance(v, list) else v}" for k, v in cols.items()))
    return "\n".join(lines)
