"""The rollout server's data-parallel replicas: M engines, each tensor-parallel over N devices.

vLLM 0.32's `LLM` refuses `data_parallel_size > 1` in one process ("not supported for single-process
usage"), so data parallelism here is TRL's `vllm-serve` layout: one `LLM` per replica, each in its
own process with its own N devices (`CUDA_VISIBLE_DEVICES` split in order: replica k gets devices
kN .. kN+N-1), replica 0 in the server's process. A generation is cut into M runs of whole
requests (a request is one prompt's group), run at once and joined in order; a weight update and a
cache reset reach every replica before the server answers, so the policy version stays one number.

`Replicas` looks like the one engine (`VLLMRolloutEngine`) to `server_app.RolloutService`: what it
does not override is replica 0's.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Callable


def device_slice(visible: str | None, index: int, size: int) -> str | None:
    """The `CUDA_VISIBLE_DEVICES` of replica `index` of `size` devices each (None: nothing to split)."""
    if not visible:
        return None
    devices = [d for d in visible.split(",") if d.strip()]
    part = devices[index * size:(index + 1) * size]
    if len(part) < size:
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible} holds {len(devices)} devices; replica {index} needs "
                         f"devices {index * size}..{(index + 1) * size - 1}")
    return ",".join(part)


def split_evenly(count: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of `parts` runs of whole items, in order, sizes differing by at most one."""
    base, extra = divmod(count, parts)
    out, start = [], 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def _replica_main(build: Callable, args, conn) -> None:
    """A child replica: build its engine, then answer (op, payload) messages until told to stop."""
    engine = build(args)
    conn.send(("ready", None))
    while True:
        try:
            op, payload = conn.recv()
        except EOFError:  # the server's process is gone: so is this replica
            return
        if op == "stop":
            return
        try:
            conn.send(("ok", _run(engine, op, payload)))
        except Exception as exc:  # noqa: BLE001 - sent back and raised in the server's process
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _run(engine, op: str, payload):
    if op == "generate":
        prompts, params = payload
        return engine.generate_raw(prompts, params)
    if op == "rpc":
        name, args = payload
        return engine.llm.collective_rpc(name, args=tuple(args))
    if op == "reset":
        return engine.reset_caches()
    if op == "load_file":
        from safetensors.torch import load_file

        return engine.load_pairs(load_file(payload).items())
    raise ValueError(f"unknown replica operation {op!r}")


class Replicas:
    """Replica 0 (`engine`, in this process) and M-1 replicas in child processes."""

    def __init__(self, engine, build: Callable, args, replicas: int, devices_each: int):
        self.engine, self.count = engine, replicas
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: vLLM's threads do not survive fork
        self._children, self._conns = [], []
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        for k in range(1, replicas):
            parent, child = ctx.Pipe()
            part = device_slice(visible, k, devices_each)
            if part is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = part  # the child inherits this at its start
            # not a daemon: vLLM starts its own worker processes inside (one per tensor-parallel shard)
            proc = ctx.Process(target=_replica_main, args=(build, args, child), name=f"mmrlvr-replica-{k}")
            proc.start()
            self._children.append(proc)
            self._conns.append(parent)
        if visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        for conn in self._conns:
            self._answer(conn)

    def __getattr__(self, name):
        if name == "engine":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.engine, name)

    def _answer(self, conn):
        try:
            status, value = conn.recv()
        except EOFError:
            raise RuntimeError("rollout server replica: its process stopped (see its log above)") from None
        if status == "error":
            raise RuntimeError(f"rollout server replica: {value}")
        return value

    def _everywhere(self, local: Callable[[], object], message: Callable[[int], tuple]) -> list:
        """Send each child its message, run replica 0's part here meanwhile, then collect in order."""
        for k, conn in enumerate(self._conns, start=1):
            conn.send(message(k))
        error: BaseException | None = None
        try:
            first = local()
        except BaseException as exc:  # noqa: BLE001 - raised below, once every child has answered
            first, error = None, exc
        answers = []
        for conn in self._conns:  # every answer is read, so the next call never reads a stale one
            try:
                answers.append(self._answer(conn))
            except RuntimeError as exc:
                error = error or exc
        if error is not None:
            raise error
        return [first] + answers

    def generate_raw(self, prompts: list, params: list) -> list:
        """The requests cut into M runs of whole requests, one per replica, answers joined in order."""
        runs = split_evenly(len(prompts), self.count)
        a, b = runs[0]
        out = self._everywhere(lambda: self.engine.generate_raw(prompts[a:b], params[a:b]),
                               lambda k: ("generate", (prompts[runs[k][0]:runs[k][1]], params[runs[k][0]:runs[k][1]])))
        return [row for part in out for row in part]

    def collective_rpc(self, name: str, args_of: Callable[[int], tuple]) -> list:
        """`LLM.collective_rpc` on every replica, replica k called with `args_of(k)`: per replica its workers' answers."""
        return self._everywhere(lambda: self.engine.llm.collective_rpc(name, args=tuple(args_of(0))),
                                lambda k: ("rpc", (name, tuple(args_of(k)))))

    def reset_caches(self) -> None:
        self._everywhere(self.engine.reset_caches, lambda k: ("reset", None))

    def load_file(self, file: str) -> None:
        from safetensors.torch import load_file

        self._everywhere(lambda: self.engine.load_pairs(load_file(file).items()), lambda k: ("load_file", file))

    def close(self) -> None:
        for conn, proc in zip(self._conns, self._children):
            try:
                conn.send(("stop", None))
            except OSError:
                pass
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
