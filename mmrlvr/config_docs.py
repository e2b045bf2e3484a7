"""`mmrlvr config`: every config key with its value and the one-line doc under its field."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from mmrlvr.config import Config


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
            else:
                shown = yaml.safe_dump(raw[f.name], default_flow_style=True).strip().removesuffix("...").strip()
                lines.append(f"{indent}{f.name}: {shown}  # {docs.get(f.name, '')}")

    walk(cfg, "")
    return "\n".join(lines)
