"""The pieces every config check is written with: a `Rule` (key, test, what is allowed), the
value tests rules use, and the one-line message format (a huge value is cut, never printed whole).

Also the table the method folders fill with their own settings' checks (`METHOD_SETTINGS`): the
validation runs them without knowing a method by name."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from mmrlvr.registry import Registry


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


def rule_lines(rules: Iterable[Rule], cfg: Any) -> Iterator[str]:
    """One line per rule whose value (set, not None) is not allowed."""
    for rule in rules:
        value = _get(cfg, rule.key)
        if value is not None and not rule.ok(value):
            yield _line(rule.key, value, f"expected {rule.allowed}")


class MethodSettings(NamedTuple):
    """A method's checks of its own settings: value rules (full dotted keys) and what one value alone
    cannot say (`check(cfg) -> lines`), run for every registered method, on or off: a typo is named
    before someone turns the method on. `warn(cfg)`: one warning line (or None) for a setting that is
    valid but pointless (`mmrlvr.checks.notes`). `resolve(cfg) -> cfg`: what the method writes into the
    one config a run reads (`mmrlvr.checks.resolve.resolve_config`)."""

    rules: tuple[Rule, ...] = ()
    check: Callable[[Any], Iterable[str]] | None = None
    warn: Callable[[Any], str | None] | None = None  # a valid setting that does not do what it looks like
    resolve: Callable[[Any], Any] | None = None  # cfg -> cfg: the method's switches made to agree (resolve_config)

    def lines(self, cfg: Any) -> Iterator[str]:
        yield from rule_lines(self.rules, cfg)
        if self.check is not None:
            yield from self.check(cfg)


METHOD_SETTINGS: Registry[MethodSettings] = Registry("method settings", plugins="mmrlvr.methods.builtin")
"""name -> the method's `MethodSettings`; each method folder registers its own (mmrlvr.methods.hooks.register)."""
