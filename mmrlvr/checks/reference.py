"""`mmrlvr config`: every config key with its value and the one-line doc under its field."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from mmrlvr.config.schema import Config, TaskConfig


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def task_args_lines(task: TaskConfig, doc: str, indent: str) -> list[str]:
    """`args:` then one line per argument of the chosen task's build(): the value this config gives
    it (else its default) and, in the comment, the default; keys the task does not take are named."""
    import inspect

    from mmrlvr.tasks._catalogue import DEPRECATED, FROM_CONFIG, arguments
    from mmrlvr.checks.validate import task_module

    try:
        takes = arguments(task_module(task.name))
    except Exception:  # noqa: BLE001 - an unimportable task is named by `mmrlvr train`'s checks
        return [f"{indent}args: {_flow(task.args)}  # {doc} (task {task.name!r} did not import: see `mmrlvr tasks {task.name}`)"]
    lines = [f"{indent}args:  # {doc} The arguments of task {task.name} (also `mmrlvr tasks {task.name}`):"]
    for arg, default in takes.items():
        if arg in DEPRECATED and arg not in task.args:
            continue
        if arg in FROM_CONFIG:
            value = task.eval_size if arg == "eval_size" else None
            if arg == "eval_size" or arg in task.args:
                lines.append(f"{indent}  {arg}: {_flow(task.args.get(arg, value))}  # from {FROM_CONFIG[arg]}")
            continue
        required = default is inspect.Parameter.empty
        value = task.args.get(arg, None if required else default)
        if required and arg not in task.args:
            note = "required"
        elif arg in task.args and (required or _flow(task.args[arg]) != _flow(default)):
            note = "set" if required else f"set; default {_flow(default)}"
        else:
            note = "default"
        if arg in DEPRECATED:
            note += f"; deprecated, use {DEPRECATED[arg]}"
        lines.append(f"{indent}  {arg}: {_flow(value)}  # {note}")
    for arg in task.args:
        if arg not in takes:
            lines.append(f"{indent}  {arg}: {_flow(task.args[arg])}  # not an argument of task {task.name!r}")
    return lines


def field_docs(cls: type) -> dict[str, str]:
    """The one-line docstring under each field of a config dataclass (read from its source)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def describe_config(cfg: Any = None) -> str:
    """Every section and key with its value (the defaults, or `cfg`'s) and its one-line doc."""
    cfg = cfg if cfg is not None else Config()
    lines: list[str] = []

    def walk(obj: Any, indent: str) -> None:
        docs, raw = field_docs(type(obj)), dataclasses.asdict(obj)
        for f in dataclasses.fields(obj):
            if dataclasses.is_dataclass(getattr(obj, f.name)):
                lines.append(f"{indent}{f.name}:")
                walk(getattr(obj, f.name), indent + "  ")
            elif isinstance(obj, TaskConfig) and f.name == "args":
                lines.extend(task_args_lines(obj, docs.get(f.name, ""), indent))
            else:
                shown = _flow(raw[f.name])
                lines.append(f"{indent}{f.name}: {shown}  # {docs.get(f.name, '')}")

    walk(cfg, "")
    return "\n".join(lines)
