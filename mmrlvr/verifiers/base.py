"""Verifier registry, plug-in resolution and the safe wrapper.

A verifier is `fn(completion: str, sample) -> Verdict`. It is only ever called through
`safe_verify` (in-process) or `VerifierPool` (worker processes with a time bound), which turn an
exception, a non-finite or out-of-range score into score 0 with the reason, so nothing a model
writes can crash a step.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
from pathlib import Path
from typing import Callable

from mmrlvr.registry import Registry
from mmrlvr.types import Verdict
from mmrlvr.verifiers.reward_styles import adapt

VerifierFn = Callable[..., Verdict]
VERIFIERS: Registry = Registry("verifier")
DESCRIPTIONS: dict[str, str] = {}
ENTRY_POINT_GROUP = "mmrlvr.verifiers"
BAD_REFERENCE = "bad reference: "  # reasons starting with this blame the data, not the model
# reasons starting with this blame the verifier: it raised, hung, died or returned no usable score.
# Such a verdict scores 0 but is a failure, not a wrong answer: counted and reported apart.
VERIFIER_FAILED = "verifier failed: "


def failed(why: str, parts: dict | None = None) -> Verdict:
    """A verdict saying the verifier (not the completion) failed; score 0, never a reward."""
    return Verdict(0.0, f"{VERIFIER_FAILED}{why}", dict(parts or {}))


def is_failure(verdict: Verdict) -> bool:
    return verdict.reason.startswith(VERIFIER_FAILED)


class BadReference(ValueError):
    """The sample's reference (or its meta) is unusable: it must give no reward to any answer."""


def finite_reference(values, n: int | None = None, what: str = "reference") -> list[float]:
    """`values` as finite floats (exactly `n` of them when given), else raise BadReference."""
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise BadReference(f"{what} {str(values)[:60]!r} is not a list of numbers") from None
    except OverflowError:  # an integer like 10**400: no float holds it
        raise BadReference(f"{what} has a number too large for a float") from None
    if n is not None and len(out) != n:
        raise BadReference(f"{what} has {len(out)} numbers, expected {n}")
    if not all(math.isfinite(v) for v in out):
        raise BadReference(f"{what} {out} is not finite")
    return out


def register_verifier(name: str, description: str = "", headline: str | None = None):
    """Decorator: add a verifier under `name`, with a one-line description for `mmrlvr verifiers`
    and the headline metric its mean score is in evaluations (`accuracy` for pass/fail answers,
    `mean_iou`, ...; stored as `fn.eval_metric`, which a plug-in may set itself)."""

    def deco(fn):
        if headline is not None:
            fn.eval_metric = headline
        VERIFIERS.register(name)(fn)
        DESCRIPTIONS[name] = description or (fn.__doc__ or "").strip().splitlines()[0]
        return fn

    return deco


def _load_builtin() -> None:
    for mod in ("answer", "exact", "format", "grounding", "temporal"):
        try:
            importlib.import_module(f"mmrlvr.verifiers.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"mmrlvr.verifiers.{mod}":
                raise


def _entry_points() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_file_fn(path: str, fn_name: str) -> VerifierFn:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"verifier file {path!r} not found")
    mod_name = f"mmrlvr_user_{abs(hash(str(file)))}"
    module = sys.modules.get(mod_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(mod_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[mod_name]  # a half-run module must not be found next time
            raise
    try:
        return getattr(module, fn_name)
    except AttributeError:
        raise AttributeError(f"verifier file {path!r} has no function {fn_name!r}") from None


def is_plugin(spec: str) -> bool:
    """True for "file.py:fn" and "module:fn": specs that import and run arbitrary code."""
    return ":" in spec


class UntrustedVerifier(ValueError):
    """A data row named code to run ("file.py:fn" or "module:fn") instead of a registered verifier."""


def check_allowed(spec: str, plugins=()) -> None:
    """Refuse a plug-in spec the user did not name (command line or config `rewards:`).

    Rows of data (JSONL to re-score, task samples) may only name registered verifiers: built-ins,
    verifiers registered by imported code, or installed entry points. Otherwise a row with
    `"verifier": "/tmp/evil.py:fn"` would run that file.
    """
    if is_plugin(spec) and plugin_key(spec) not in {plugin_key(p) for p in plugins}:
        raise UntrustedVerifier(
            f"verifier {spec!r} is not a registered verifier; file.py:fn and module:fn plug-ins are "
            "allowed only from the command line (--verifier) or the config's rewards:"
        )


def plugin_key(spec: str) -> str:
    """A plug-in spec with its file path made absolute, so "./v.py:f" and "v.py:f" compare equal."""
    if is_plugin(spec):
        target, fn_name = spec.rsplit(":", 1)
        if target.endswith(".py") or "/" in target:
            return f"{Path(target).expanduser().resolve()}:{fn_name}"
    return spec


def resolve_verifier(spec: str, allow_code: bool = True) -> VerifierFn:
    """A registry name, "path/to/file.py:fn", "package.module:fn" or an entry-point name.

    `allow_code=False` refuses plug-in specs (use it for names that come from data). Plug-ins
    written as TRL or EasyR1 reward functions come back adapted to the per-item call
    (`mmrlvr.verifiers.reward_styles`); a signature of no known shape raises here, at load.
    """
    _load_builtin()
    if spec in VERIFIERS:
        return VERIFIERS.get(spec)
    if is_plugin(spec):
        if not allow_code:
            check_allowed(spec)
        target, fn_name = spec.rsplit(":", 1)
        if target.endswith(".py") or "/" in target:
            return adapt(_load_file_fn(target, fn_name))
        return adapt(getattr(importlib.import_module(target), fn_name))
    eps = _entry_points()
    if spec in eps:
        return adapt(eps[spec].load())
    return VERIFIERS.get(spec)  # raises with the list of known names


def available_verifiers() -> dict[str, str]:
    """name -> one-line description, built-ins and entry points."""
    _load_builtin()
    out = dict(DESCRIPTIONS)
    for name, ep in _entry_points().items():
        out.setdefault(name, f"(entry point {ep.value})")
    return dict(sorted(out.items()))


def clean_verdict(result, bounded: bool = True) -> Verdict:
    """What a verifier returned as a Verdict with a finite score in [0, 1], else a failure.

    A string, NaN, or a score outside [0, 1] (1e9) is the verifier's bug, never a reward: clipping
    1e9 to 1.0 would reward every completion silently. `bounded=False` (TRL and EasyR1 reward
    functions, whose scores are any real number) still refuses non-finite and non-numeric ones."""
    if isinstance(result, Verdict):
        v = result
    elif isinstance(result, (int, float)) and not isinstance(result, bool):
        v = Verdict(float(result), "")
    elif isinstance(result, dict) and "score" in result:
        v = Verdict(result["score"], str(result.get("reason", "")), dict(result.get("parts") or {}))
    else:
        return failed(f"returned {type(result).__name__}, not a Verdict or a number")
    if isinstance(v.score, bool):
        return failed(f"returned a bool score {v.score!r}, not a number")
    try:
        score = float(v.score)
    except (TypeError, ValueError, OverflowError):
        return failed(f"non-numeric score {str(v.score)[:60]!r}")
    if not math.isfinite(score):
        return failed(f"non-finite score {score}")
    if bounded and not 0.0 <= score <= 1.0:
        return failed(f"score {score:g} outside [0, 1]")
    raw = v.parts if isinstance(v.parts, dict) else {}
    parts = {str(k): float(x) for k, x in raw.items()
             if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)}
    return Verdict(score, str(v.reason), parts)


def safe_verify(fn: VerifierFn, completion: str, sample, timeout: float | None = None) -> Verdict:
    """Call a verifier in this process; any exception becomes score 0 with the reason.

    A synchronous call has no time bound here: use `VerifierPool` when a verifier may hang (math,
    user code). An `async def` verifier is awaited for at most `timeout` seconds (the verifier
    time-out; None: no bound), and running out is a failure like a raise. A plug-in's `sys.exit`
    is a failure too (in-process it would end the whole program with exit status 0).
    """
    try:
        result = fn(completion, sample)
        if inspect.isawaitable(result):
            try:
                result = run_awaitable(result, timeout)
            except TimeoutError:
                if timeout is None:
                    raise
                return failed(f"timed out after {timeout:g}s")
        return clean_verdict(result, bounded=not getattr(fn, "unbounded", False))
    except BadReference as exc:
        return Verdict(0.0, f"{BAD_REFERENCE}{exc}")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - model output must never crash a step
        return failed(f"raised {type(exc).__name__}: {str(exc)[:200]}")


def run_awaitable(awaitable, timeout: float | None):
    """The value of `awaitable`, awaited for at most `timeout` seconds (TimeoutError past it) on an
    event loop of its own; in a thread of its own when this thread already runs a loop (a notebook)."""
    import asyncio

    async def bounded():
        return await asyncio.wait_for(awaitable, timeout)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as one:
        return one.submit(asyncio.run, bounded()).result()
