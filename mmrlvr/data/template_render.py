"""Rendering a user's prompt template (`task.args.prompt_template`) with bounds.

The template is the user's own file, trusted like the config that names it; the bounds are there
so that a mistake in it costs one line naming the template and the row, not a traceback deep in
jinja2 or a process that grows until the machine kills it. jinja2's `SandboxedEnvironment` already
refuses attribute access to internals and a single `range` longer than 100,000 items; on top:
- the output is read as it streams and stops past `MAX_CHARS` characters;
- `*` and `**` are checked before they run (`'x' * 10**9`, `9 ** 10**9`);
- all `range`s of one rendering share one budget of `MAX_RANGE_ITEMS` items (nested loops);
- any error while rendering (`1/0`, `{% include %}` without a loader, deep recursion) is one
  `BadRow`, which the row loop reports with the file and row like any other bad row.
It is a guard against mistakes, not a security boundary against a hostile template.
"""

from __future__ import annotations

import functools

from mmrlvr.data.io import BadRow

MAX_CHARS = 1_000_000  # a prompt far past any model's context
MAX_RANGE_ITEMS = 100_000  # summed over every range() of one rendering
MAX_POW_BITS = 4_096  # bits of an integer power's result


def _size(value) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


class _Bounded:
    """Mixin over `SandboxedEnvironment`: `*` and `**` checked before they run."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                n = _size(seq)
                if n is not None and isinstance(times, int) and n * times > MAX_CHARS:
                    raise OverflowError(f"repeating a sequence of {n} {times} times makes more than {MAX_CHARS:,} items")
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            if abs(left) > 1 and left.bit_length() * right > MAX_POW_BITS:
                raise OverflowError(f"{left} ** {right} has more than {MAX_POW_BITS} bits")
        return super().call_binop(context, operator, left, right)


@functools.lru_cache(maxsize=8)
def _environment_class():
    from jinja2.sandbox import SandboxedEnvironment

    return type("BoundedEnvironment", (_Bounded, SandboxedEnvironment), {})


@functools.lru_cache(maxsize=8)
def _compiled(text: str):
    import jinja2

    return _environment_class()(undefined=jinja2.StrictUndefined, keep_trailing_newline=False).from_string(text)


def _budgeted_range(budget: list[int]):
    from jinja2.sandbox import safe_range

    def bounded(*args: int) -> range:
        rng = safe_range(*args)
        budget[0] -= len(rng)
        if budget[0] < 0:
            raise OverflowError(f"the template's range() calls draw more than {MAX_RANGE_ITEMS:,} items in all")
        return rng

    return bounded


def render_template(text: str, path: str, fields: dict) -> str:
    """`text` rendered with a row's `fields`, stripped; BadRow naming `path` on any failure or bound."""
    import jinja2

    try:
        template = _compiled(text)
        parts, total = [], 0
        for chunk in template.generate(**{"range": _budgeted_range([MAX_RANGE_ITEMS]), **fields}):
            total += len(chunk)
            if total > MAX_CHARS:
                raise OverflowError(f"the rendered prompt passes {MAX_CHARS:,} characters")
            parts.append(chunk)
        return "".join(parts).strip()
    except jinja2.UndefinedError as exc:
        raise BadRow(f"prompt_template {path}: {exc.message}; fields: {', '.join(sorted(fields))}") from None
    except RecursionError:
        raise BadRow(f"prompt_template {path}: recursion too deep while rendering") from None
    except Exception as exc:  # noqa: BLE001 - 1/0, include without a loader, a filter's TypeError ...
        raise BadRow(f"prompt_template {path}: {type(exc).__name__}: {exc}") from None
