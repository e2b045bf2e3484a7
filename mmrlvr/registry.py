"""Name -> callable maps with a duplicate guard and errors that list what is known.

A registry of a lower layer may be filled from a higher one: the method folders
(`mmrlvr.methods.builtin` imports their records) register their estimator, weighting, episode and checks into the tables of
`algos`, `rollout` and `checks`. Such a registry names its plug-in package (`plugins=`), imported
by name the first time the registry is read, as Python's entry points load a plug-in: the lower
layer never imports the higher one, and a reader that comes first (`mmrlvr validate` reaching
the checks, a test calling an estimator) still sees every built-in method.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A named table of callables; `@reg.register("name")` adds one, `reg.get("name")` finds it."""

    def __init__(self, kind: str, plugins: str | None = None):
        self.kind = kind
        self._items: dict[str, F] = {}
        self._plugins = plugins  # the package whose import registers the rest (None: nothing to load)

    def _load(self) -> None:
        """Import the plug-in package once, before the first read (cleared first: its import reads us)."""
        if self._plugins is not None:
            name, self._plugins = self._plugins, None
            try:
                importlib.import_module(name)
            except BaseException:
                self._plugins = name  # a failed import is raised again on the next read, never half a table
                raise

    def register(self, name: str) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if name in self._items and self._items[name] is not fn and self._items[name] != fn:  # the same again: no clash
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> F:
        self._load()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._items

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def in_order(self) -> list[str]:
        """The names in the order they were registered: a message lists them as the code defines them."""
        self._load()
        return list(self._items)

    def items(self) -> list[tuple[str, F]]:
        self._load()
        return sorted(self._items.items())

    def snapshot(self) -> dict[str, F]:
        """A copy of the table, its plug-ins loaded first, in registration order.

        What a test swaps in (`monkeypatch.setattr(reg, "_items", reg.snapshot())`) to register a
        throwaway: a copy taken before the load would leave the plug-ins in the copy, and the real
        table empty for good once the patch is undone."""
        self._load()
        return dict(self._items)
