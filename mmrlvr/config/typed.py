"""Building the config's dataclasses from YAML values: every key checked against its field's type.

A wrong type, an unknown key (with "did you mean", from the whole config's keys) or a null where
the field has no unset value is one `ConfigError` line naming the dotted key, before anything
reads the config. `root` is the top-level dataclass whose keys the suggestions are drawn from.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from mmrlvr.config.keys import ConfigError, _bare, did_you_mean
from mmrlvr.config.limits import short
from mmrlvr.config.sections import field_types


def build(cls: type, raw: Any, where: str, root: type) -> Any:
    """`raw` (a mapping, or None: the defaults) as a `cls`, every field coerced to its type."""
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {short(raw)}", where or None)
    hints = field_types(cls)  # a method's section: the class its folder registered
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names, key=str)
    if unknown:
        key = f"{where}.{unknown[0]}" if where else str(unknown[0])
        near = did_you_mean(key, root) if isinstance(unknown[0], str) else None
        hint = f"; did you mean {near}? (known: {{}})" if near else "; known: {}"
        raise ConfigError(f"unknown config key '{short(key, 60).strip(chr(39))}'" + hint.format(", ".join(sorted(names))), key)
    kwargs = {}
    for name, value in raw.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}" if where else name, root)
    return cls(**kwargs)


def _optional(tp: Any) -> bool:
    return tp is Any or (typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp))


def _coerce(tp: Any, value: Any, where: str, root: type) -> Any:
    if value is None and not _optional(tp):
        # `rollout:` with nothing under it (or `rollout=null`) is the section's defaults, and an
        # empty mapping or list the same; a scalar without an unset value is one line here, not
        # an AttributeError after the model has loaded
        bare = _bare(tp)
        if dataclasses.is_dataclass(bare):
            return build(bare, None, where, root)
        if typing.get_origin(bare) in (dict, list) or bare in (dict, list):
            return (typing.get_origin(bare) or bare)()
        name = getattr(bare, "__name__", str(bare))
        raise ConfigError(f"{where}: expected {name}, got null (this key has no unset value)", where or None)
    tp = _bare(tp)
    if value is None:
        return None
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where, root)
    origin = typing.get_origin(tp)
    if (origin is dict or tp is dict) and not isinstance(value, dict):  # `task.args=[1, 2]`
        raise ConfigError(f"{where}: expected a mapping, got {short(value)}")
    if origin is list:
        (inner,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {short(value)}", where or None)
        return [_coerce(inner, v, f"{where}[{i}]", root) for i, v in enumerate(value)]
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, float, str, bool) and not isinstance(value, tp):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {short(value)}", where or None)
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"{where}: expected int, got {short(value)}", where or None)
    return value
