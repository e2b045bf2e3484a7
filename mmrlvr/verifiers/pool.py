"""Verifiers in worker processes, with a time bound on every call.

math-verify's own time-outs use `signal.alarm`, which only works in a main thread, and a regex or
sympy call on hostile model output can run for minutes. So verifiers run in a reusable pool of
spawned processes: each item gets an alarm inside the worker, and the parent has a hard deadline
after which a stuck pool is killed and rebuilt. Either way the item scores 0 with a reason starting
"verifier failed: " (a failure, counted apart from wrong answers by `FailureCounter`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing as mp
import signal
import time
from concurrent.futures import ProcessPoolExecutor, wait
from typing import Sequence

from mmrlvr.types import Sample, Verdict
from mmrlvr.verifiers.base import check_allowed, failed, is_plugin, plugin_key, resolve_verifier, safe_verify
from mmrlvr.verifiers.failures import FailureCounter


class VerifierTimeout(BaseException):
    """Raised by the alarm inside a worker; a BaseException so verifiers cannot swallow it."""


_FNS: dict = {}


def _on_alarm(signum, frame):
    raise VerifierTimeout()


def _watch_parent(parent_pid: int, pdeathsig: bool) -> None:
    """Worker initializer: exit when the trainer dies, even by SIGKILL (no cleanup runs then).

    Linux: the kernel sends SIGKILL when the parent goes (prctl PR_SET_PDEATHSIG), which also stops
    a worker stuck in C code; only when spawned from the main thread, because the signal follows
    the spawning *thread*. Elsewhere, and as a fallback, a thread polls the parent pid each second.
    """
    import ctypes
    import os
    import sys
    import threading

    if pdeathsig and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(1)

    def poll() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=poll, daemon=True, name="mmrlvr-watch-parent").start()


def _run_chunk(spec: str, items: list, timeout: float) -> list[Verdict]:
    """Worker side: score items one by one, each under its own alarm."""
    fn = _FNS.get(spec)
    if fn is None:
        fn = _FNS[spec] = resolve_verifier(spec)
        warmup = getattr(fn, "warmup", None)
        if warmup is not None:  # heavy imports (sympy) happen once, outside the time bound
            warmup()
    signal.signal(signal.SIGALRM, _on_alarm)
    out = []
    for completion, sample in items:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            out.append(safe_verify(fn, completion, sample, timeout))  # VerifierTimeout is not an Exception
        except VerifierTimeout:
            out.append(failed(f"timed out after {timeout:g}s"))
        except KeyboardInterrupt:  # raised by the verifier itself: the parent's Ctrl-C kills the pool
            out.append(failed("raised KeyboardInterrupt"))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return out


def portable_spec(spec: str, plugins=None) -> str:
    """Check a spec here (clear errors in the caller) and say how a fresh worker finds it.

    Plug-ins must be among `plugins` (what the user named; None: the caller checked); file
    paths become absolute. A name
    registered by imported code (a task module) becomes "module:fn", which the worker imports.
    """
    if plugins is not None:
        check_allowed(spec, plugins)
    fn = resolve_verifier(spec)
    if is_plugin(spec):
        return plugin_key(spec)
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("mmrlvr.verifiers.") or module in ("", "__main__") or module.startswith("mmrlvr_user_"):
        return spec
    return f"{module}:{fn.__name__}"


@contextlib.contextmanager
def _main_script_hidden():
    """While worker processes start: a spawned child re-runs the parent's `__main__` script (as
    `__mp_main__`) to rebuild its globals, and a user script that calls `mmrlvr.run` at top level,
    without `if __name__ == "__main__":`, would start a whole training run in every worker. Nothing
    the workers run lives in `__main__` (verifier plug-ins load by path, `mmrlvr.run`'s reward
    callables travel pickled by value), so the script is hidden from the spawn's preparation data
    for that moment; `python -m` mains are left alone (they are re-imported by name, guarded by it)."""
    import sys

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(spec, "name", None) is not None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _light(sample):
    """What a verifier needs of a sample: no images or frames cross the process boundary."""
    if isinstance(sample, Sample):
        return dataclasses.replace(sample, messages=(), images=(), videos=())
    return sample


class VerifierPool:
    """Callable scorer: `pool(spec, completions, samples) -> list[Verdict]`, order preserved."""

    def __init__(self, timeout: float = 5.0, workers: int = 2, grace: float = 10.0, plugins=None):
        # the plug-in specs the user named, which data may name; None: the caller checked
        self.plugins = None if plugins is None else tuple(plugins)
        self.timeout = float(timeout)
        self.workers = max(1, int(workers))
        self.grace = float(grace)  # extra seconds the parent waits (worker start-up) before killing
        self._pool: ProcessPoolExecutor | None = None
        self._specs: dict[str, str] = {}
        self.failures = FailureCounter()  # per verifier: failed verdicts, warned past a small share

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import os
            import threading

            on_main = threading.current_thread() is threading.main_thread()  # workers spawn from here
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_watch_parent, initargs=(os.getpid(), on_main))
        return self._pool

    def _kill(self) -> None:
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.kill()
            # the processes are gone, so waiting is short; it also joins the pool's manager thread,
            # which would otherwise race CPython 3.11's exit hook on a closed pipe (EBADF traceback)
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __call__(self, spec: str, completions: Sequence[str], samples: Sequence) -> list[Verdict]:
        if spec not in self._specs:
            self._specs[spec] = portable_spec(spec, self.plugins)
        items = [(c, _light(s)) for c, s in zip(completions, samples)]
        if not items:
            return []
        size = max(1, min(64, math.ceil(len(items) / (self.workers * 4))))
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        pool = self._executor()
        with _main_script_hidden():  # the workers start on the first submit
            futures = [pool.submit(_run_chunk, self._specs[spec], chunk, self.timeout) for chunk in chunks]
        deadline = self.timeout * (math.ceil(len(items) / self.workers) + 1) + self.grace
        t0 = time.monotonic()
        wait(futures, timeout=deadline)
        out: list[Verdict] = []
        broken = False
        for fut, chunk in zip(futures, chunks):
            if fut.done() and fut.exception() is None:
                out.extend(fut.result())
                continue
            broken = True
            why = ("its process did not answer in time" if not fut.done()
                   else f"its process died ({str(fut.exception())[:200] or type(fut.exception()).__name__})")
            out.extend(failed(why) for _ in chunk)
        if broken:
            self._kill()
        self.last_seconds = time.monotonic() - t0
        self.failures.record(spec, out)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
