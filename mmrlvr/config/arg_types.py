"""The type of each `task.args` value, from the task's own `build()` signature.

A task declares its arguments once, in `build(split, size, seed, max_red: int = 5, ...)`; that
declaration (the annotation, else the default's type) is what a value in `task.args` must be. A
value of the wrong kind (`task.args.holdout_frac=two`) is one line naming the key, the value and
the type before any row is read, instead of a `TypeError` deep in the task after the data loads.
Annotations this module does not understand (a class of the task's own, a `Callable`) accept
anything: the check never refuses what the task might take.
"""

from __future__ import annotations

import collections.abc as abc
import inspect
import types
import typing
from typing import Any

_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "text",
          dict: "a mapping", list: "a list", tuple: "a list"}


def declared_types(build) -> dict[str, Any]:
    """{argument: its type} of a task's build(): the annotation, else the type of a non-None default."""
    try:
        hints = typing.get_type_hints(build)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: fall back to the defaults
        hints = {}
    out = {}
    for name, p in inspect.signature(build).parameters.items():
        if name in hints:
            out[name] = hints[name]
        elif p.default is not inspect.Parameter.empty and p.default is not None:
            out[name] = type(p.default)
    return out


def _members(hint) -> tuple | None:
    """The members of `X | Y` / `Optional[X]`, else None."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return None


def accepts(hint, value) -> bool:
    """Whether `value` (as YAML or Python gives it) is of the declared type `hint`."""
    members = _members(hint)
    if members is not None:
        return any(accepts(m, value) for m in members)
    if hint is type(None) or hint is None:
        return value is None
    if typing.get_origin(hint) is typing.Literal:
        return value in typing.get_args(hint)
    base = typing.get_origin(hint) or hint
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base in (list, tuple, abc.Sequence, abc.Iterable):
        return isinstance(value, (list, tuple))
    if base is dict:
        return isinstance(value, dict)
    if base is str:
        return isinstance(value, str)
    return True  # a type this check does not know: the task decides


def expected(hint) -> str:
    """`hint` in words: "a number (float)", "an integer (int) or null"."""
    members = _members(hint)
    if members is not None:
        words = [expected(m) for m in members if m is not type(None)]
        return " or ".join(words + (["null"] if type(None) in members else []))
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(hint)))
    base = typing.get_origin(hint) or hint
    name = getattr(base, "__name__", str(base))
    return f"{_NAMES[base]} ({name})" if base in _NAMES else name


def type_problems(build, args: dict) -> list[tuple[str, Any, str]]:
    """(argument, value, expected type in words) for each value in `args` its declaration refuses."""
    declared = declared_types(build)
    return [(name, value, expected(declared[name])) for name, value in args.items()
            if name in declared and not accepts(declared[name], value)]
