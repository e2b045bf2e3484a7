"""Config keys as the user typed them: dotted overrides, "did you mean" for a near miss, and
which override (not the YAML file) a bad key or value came from.

A typo such as `rollout.group_siz=4` costs a run only if the error is hard to act on: the line
names the closest real key, and blames the override that set it rather than the file the user
did not touch.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from typing import Any

import yaml

from mmrlvr.config.limits import ConfigError, short  # noqa: F401 - ConfigError re-exported
from mmrlvr.config.sections import field_types, sections_now


def _parse_value(text: str) -> Any:
    return yaml.safe_load(text) if text != "" else ""


def override_key(item: str) -> str:
    """"train.lr=1e-5" -> "train.lr" (the key an override sets)."""
    return item.split("=", 1)[0].strip()


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Set `a.b.c=value` entries in a nested dict (values parsed as YAML scalars/lists)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {short(item)} is not key=value")
        key, value = item.split("=", 1)
        node = raw
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a section")
        try:
            node[parts[-1]] = _parse_value(value)
        except yaml.YAMLError as exc:  # `task.args={a:` - the value, not a traceback from the parser
            raise ConfigError(f"override {key.strip()!r}: value {short(value)} is not valid YAML "
                              f"({getattr(exc, 'problem', None) or exc})", key=key.strip()) from None
    return raw


def _bare(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def schema_keys(cls: type) -> tuple[str, ...]:
    """Every dotted key of a config dataclass, sections included: ("seed", "model", "model.path",
    ..., "rewards[].weight"); a list of sections is written with "[]". A method's section is the
    class its folder registered (`mmrlvr.config.sections`), so the cache is keyed on them too."""
    return _schema_keys(cls, sections_now())


@functools.lru_cache(maxsize=8)
def _schema_keys(cls: type, sections: tuple) -> tuple[str, ...]:
    out: list[str] = []
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        tp = _bare(hints[f.name])
        out.append(f.name)
        if typing.get_origin(tp) is list and typing.get_args(tp):
            tp, name = _bare(typing.get_args(tp)[0]), f"{f.name}[]"
        else:
            name = f.name
        if dataclasses.is_dataclass(tp):
            out += [f"{name}.{k}" for k in _schema_keys(tp, sections)]
    return tuple(out)


def did_you_mean(key: str, cls: type) -> str | None:
    """The schema key closest to a mistyped `key` (difflib over every dotted key), or None.

    "rollout.group_siz" -> "rollout.group_size"; "train.group_size" -> "rollout.group_size" (a
    key in the wrong section); list positions are kept: "rewards[1].wieght" -> "rewards[1].weight"."""
    plain = re.sub(r"\[\d+\]", "[]", key)
    keys = schema_keys(cls)
    best = difflib.get_close_matches(plain, keys, n=1, cutoff=0.75)
    if not best:  # the right name in the wrong section: match the last part alone
        leaf = plain.rsplit(".", 1)[-1]
        near = difflib.get_close_matches(leaf, [k.rsplit(".", 1)[-1] for k in keys], n=1, cutoff=0.8)
        best = [k for k in keys if near and k.rsplit(".", 1)[-1] == near[0]][:1]
    if not best or best[0] == plain:
        return None
    indices = iter(re.findall(r"\[\d+\]", key))
    return re.sub(r"\[\]", lambda m: next(indices, "[]"), best[0])


def near_name(name: str, names: list[str]) -> str:
    """" (did you mean max_red?)" for a near miss among `names` (a task's arguments), else ""."""
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return f" (did you mean {near[0]}?)" if near else ""


def blamed_override(key: str | None, overrides: list[str]) -> str | None:
    """The last override that set `key` or a section holding it ("rollout={group_siz: 4}"
    holds "rollout.group_siz"), or None: then the key came from the YAML file or dict."""
    if not key:
        return None
    for item in reversed(overrides):
        set_key = override_key(item)
        if key == set_key or key.startswith((set_key + ".", set_key + "[")):
            return item
    return None


def blame(exc: ConfigError, overrides: list[str], source: str | None) -> ConfigError:
    """`exc` as the user should read it: prefixed with the override that set its key, else with
    `source` (the YAML path) when there is one."""
    item = blamed_override(exc.key, overrides)
    if item is not None:
        said = item if len(item) <= 120 else item[:117] + "..."
        return ConfigError(f"override `{said}`: {exc}", exc.key)
    return ConfigError(f"{source}: {exc}" if source else str(exc), exc.key)
