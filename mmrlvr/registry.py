"""Name -> callable maps with a duplicate guard and errors that list what is known."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A named table of callables; `@reg.register("name")` adds one, `reg.get("name")` finds it."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            if name in self._items and self._items[name] is not fn:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def names(self) -> list[str]:
        return sorted(self._items)

    def in_order(self) -> list[str]:
        """The names in the order they were registered: a message lists them as the code defines them."""
        return list(self._items)

    def items(self) -> list[tuple[str, F]]:
        return sorted(self._items.items())
