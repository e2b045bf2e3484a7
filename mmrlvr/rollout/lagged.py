"""One step off-policy rollouts (`rollout.async_steps: 1`): step t+1's batch is generated while step t trains.

`Lookahead` draws step t+1's prompts early (right after step t's rewards were fed back, so a
source sees the same order of feedback and draws as in a synchronous run) and hands them to the
collect of step t+1; its `state_dict` is the source's state before that draw, so a checkpoint of
step t resumes with the same prompts for step t+1.

`LaggedEngine` sends those prompts to the server in a background thread (the HTTP wait releases
the GIL; the server generates on its own cores) with the seed step t+1's first round uses, and
answers that round from the result. `sync_weights` waits for the generation in flight before
sending step t's weights, so the batch of step t+1 is always sampled by the weights synced after
step t-1: its policy version is one behind the learner's (`rollout/staleness` = 1). Every other
rollout (later rounds, evaluation, a method's extra rollouts) goes to the server synchronously.

Resume: the batch in flight is not saved; the resumed run regenerates it, with the checkpoint's
weights (staleness 0 for that one step), so an async run resumed at step t differs from an
uninterrupted one from step t+1 on (a synchronous run resumes exactly).
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import Future, ThreadPoolExecutor


class Lookahead:
    """A prompt source whose next `take(n, step)` may have been drawn early by `peek(n, step)`."""

    def __init__(self, source):
        self.source = source
        self._peeked: tuple[int, int, list, dict] | None = None  # (n, step, samples, state before the draw)

    def peek(self, n: int, step: int) -> list:
        state = copy.deepcopy(self.source.state_dict())
        samples = self.source.take(n, step)
        self._peeked = (n, step, samples, state)
        return samples

    def take(self, n: int, step: int = 0) -> list:
        peeked, self._peeked = self._peeked, None
        if peeked is not None and peeked[:2] == (n, step):
            return peeked[2]
        if peeked is not None:  # drawn for another request: undo the draw
            self.source.load_state_dict(peeked[3])
        return self.source.take(n, step)

    def state_dict(self) -> dict:
        return copy.deepcopy(self._peeked[3]) if self._peeked is not None else self.source.state_dict()

    def load_state_dict(self, d: dict) -> None:
        self._peeked = None
        self.source.load_state_dict(d)

    def __getattr__(self, name):  # feedback, metrics, pop_bad, close, pos
        if name == "source":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.source, name)


class LaggedEngine:
    """A server engine whose next round can be generated ahead, in one background thread."""

    def __init__(self, engine):
        self.engine = engine
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mmrlvr-rollout")
        self._ahead: tuple[tuple, Future] | None = None

    @staticmethod
    def _key(samples, group_size: int, seed: int) -> tuple:
        return tuple(s.id for s in samples), int(group_size), int(seed)

    def generate_ahead(self, samples, group_size: int, sampling, seed: int) -> None:
        """Start sampling `samples` with the server's current weights; `rollout` with the same key takes it."""
        self.wait()
        fut = self._pool.submit(self._timed, list(samples), group_size, sampling, seed)
        self._ahead = (self._key(samples, group_size, seed), fut)

    def _timed(self, samples, group_size: int, sampling, seed: int):
        t0 = time.perf_counter()
        out = self.engine.rollout(samples, group_size, sampling, seed, return_logprobs=True)
        out.gen_seconds = time.perf_counter() - t0
        return out

    def wait(self) -> None:
        """Block until the generation in flight (if any) has finished; its result (or error) is kept."""
        if self._ahead is not None:
            self._ahead[1].exception()

    def rollout(self, samples, group_size: int, sampling, seed: int, greedy: bool = False,
                max_new_tokens: int | None = None, return_logprobs: bool = False):
        ahead = self._ahead
        if ahead is not None and not greedy and max_new_tokens is None and ahead[0] == self._key(samples, group_size, seed):
            self._ahead = None
            return ahead[1].result()  # the server's error, if it failed, is raised here: one line
        self.wait()
        return self.engine.rollout(samples, group_size, sampling, seed, greedy=greedy,
                                   max_new_tokens=max_new_tokens, return_logprobs=return_logprobs)

    def generate(self, samples, group_size: int, sampling, seed: int):
        return self.rollout(samples, group_size, sampling, seed).completions

    def sync_weights(self, model) -> None:
        self.wait()  # the batch in flight keeps the weights it started with
        self.engine.sync_weights(model)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.engine.close()

    def __getattr__(self, name):  # suppress_ids, pad_id, processor, version, synced_version
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)
