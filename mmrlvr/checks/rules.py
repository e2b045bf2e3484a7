"""The pieces every config check is written with: a `Rule` (key, test, what is allowed), the
value tests rules use, and the one-line message format (a huge value is cut, never printed whole)."""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple


MAX_SERVER_TIMEOUT_S = 86_400  # a day: longer is a typo (1e10 overflows the socket and store timeouts)


class Rule(NamedTuple):
    key: str  # dotted config key; "algo.*" keys are checked after the preset fills them
    ok: Callable[[Any], bool]  # True when the value is allowed (None always is: "unset")
    allowed: str  # what is allowed, said to the user


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def at_least(lo: float) -> Callable[[Any], bool]:
    return lambda v: _num(v) and v >= lo


def above(lo: float) -> Callable[[Any], bool]:
    return lambda v: _num(v) and v > lo


def one_of(*names: str) -> Callable[[Any], bool]:
    return lambda v: v in names


def either(names) -> str:
    """"a, b or c": the allowed names of a registry as a message says them."""
    names = list(names)
    return " or ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def finite(v) -> bool:
    return _num(v)


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _line(key: str, value: Any, allowed: str) -> str:
    from mmrlvr.config.limits import short

    return f"{key}={short(value)}: {allowed}"  # a huge value is cut, never printed whole
