"""Bounds on what a config may hold, short value text for error lines, and the error they raise.

A YAML alias bomb is a few hundred bytes that expand to billions of values when the config is
copied (`dataclasses.asdict`), saved or printed; `check_expanded_size` counts values (shared
nodes once per use) and stops at the bound, and `short` prints a value cut to a line.
`ConfigError` lives here, the leaf every config module imports, so none needs another back.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config file or override that does not fit the schema. `key`: the dotted key at fault
    (None when no single key is), so a caller can say which override set it."""

    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


MAX_CONFIG_VALUES = 100_000
"""Values a config may hold once YAML aliases are expanded: a 474-byte alias bomb ("billion
laughs") would otherwise expand to billions when the config is copied, saved or printed."""


def short(value: Any, limit: int = 80) -> str:
    """repr of a value cut to `limit` characters, without expanding it first (huge nested values)."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 6, 6, 6, 6
    r.maxstring, r.maxother, r.maxlong = limit, limit, 40
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_expanded_size(raw: Any, where: str, limit: int = MAX_CONFIG_VALUES) -> None:
    """Raise ConfigError when `raw`, with every shared (aliased) node counted each time it is
    used, holds more than `limit` values. The walk stops at the limit, so it is cheap on a bomb."""
    count, stack = 0, [raw]
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            raise ConfigError(f"{where}: holds more than {limit} values once YAML aliases are expanded "
                              "(an alias bomb?); write the values out or use fewer aliases")
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
