"""Several rollout servers behind one engine (`rollout.server_url` a list): the loop sees one engine.

Spread. Each rollout call splits its prompts over the servers in whole groups (a prompt's G
completions stay on one server, where vLLM shares the prompt's prefill between them), balanced by
expected tokens: the prompt's tokens as the processor encodes them (image and video tokens
included) plus `max_tokens x G`, the most its completions can add (`expected_tokens`). The
heaviest prompt goes first to the least-loaded server (ties: the server listed first), so the same
batch always goes the same way (`spread`). The servers are asked at once, one thread each (the HTTP
wait releases the GIL), and the completions are put back in the prompts' order.

Seeds. The sampling fields are made once for the whole batch (`ServerRolloutEngine.requests`: each
prompt's seed from its place in the batch) and each server gets its prompts' fields unchanged, so a
prompt is sampled with the seed one server would give it. vLLM seeds each request's own generator,
so where the servers run the same weights (after every sync they do), the same vLLM build, device
type and dtype, the completions equal one server's; only a near-tie that another batch's rounding
flips could differ, as on one server with another batch.

Weights. After each update the one process that syncs (rank 0, today's rule for one server) sends
the weights to each server in the listed order, each checked to count exactly that update; the
other ranks then read every server's version. A sharded policy (FSDP2) broadcast to the servers is
gathered one bucket at a time (`server.sync_sharded`): rank 0 sends to each server in the listed order
and the other ranks join each of those sends' gathers, cut by that server's bucket size. The servers count their updates from where they
were when the run connected (a restarted server starts at 0), so the pool's version is the first
server's, and every server must have moved by as many updates as it: otherwise one line names them
(`agreed`), as for one server whose version moved without this trainer's sync.

Failures. A server that dies, times out or answers wrongly is the one `RolloutServerError` line it
gives alone (the first failure; the other servers' answers are dropped and their threads, daemons,
are not waited for), so the run stops cleanly with its last checkpoint intact.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Sequence

from mmrlvr.data.collate import encode_prompts
from mmrlvr.rollout.base import RolloutOutput
from mmrlvr.rollout.server import (
    ServerRolloutEngine, _rank_world, gathers_by_bucket, sync_pairs_of, sync_sharded,
)
from mmrlvr.rollout.server_http import RolloutServerError
from mmrlvr.rollout.vllm_inputs import rollout_output
from mmrlvr.types import Completion, Sample

# what each server of a pool must answer alike in GET /info (the weights are the learner's after the
# first sync, so the model directory each was started from may differ)
SAME_INFO = ("model_type", "dtype", "vocab_size", "suppress_ids", "stop_ids", "processor_kwargs", "max_model_len")


def setting_differences(first: dict, other: dict) -> list[str]:
    """What two servers' GET /info answers differ in among `SAME_INFO` (empty: they sample alike)."""
    return [f"{k}: {first.get(k)!r} vs {other.get(k)!r}" for k in SAME_INFO if other.get(k) != first.get(k)]


def expected_tokens(prompt_tokens: Sequence[int], max_tokens: int, group_size: int) -> list[int]:
    """A prompt's expected cost on a server: its own tokens (prefilled once) + the most its G completions add."""
    return [int(p) + int(max_tokens) * int(group_size) for p in prompt_tokens]


def spread(costs: Sequence[int], n_servers: int, first: int = 0) -> list[list[int]]:
    """Prompt indices per server: heaviest first to the least-loaded server (ties: the first server
    at or after `first`, in a circle), each server's indices in the batch's order. Deterministic: the
    same costs give the same split. Each training rank passes its rank as `first`, so ranks whose
    prompts leave a tie (an odd count) do not all send the extra group to the same server."""
    loads = [0] * n_servers
    parts: list[list[int]] = [[] for _ in range(n_servers)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        k = min(range(n_servers), key=lambda k: (loads[k], (k - first) % n_servers))
        loads[k] += costs[i]
        parts[k].append(i)
    return [sorted(p) for p in parts]


def at_once(calls: Sequence[Callable[[], object]]) -> list:
    """Run `calls` in daemon threads; their results in order, or the first failure raised (the rest not
    waited for: a dead server stops the run now, not at the slowest other server's deadline)."""
    if len(calls) == 1:
        return [calls[0]()]
    done: queue.Queue = queue.Queue()

    def run(i, fn):
        try:
            done.put((i, True, fn()))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            done.put((i, False, exc))

    for i, fn in enumerate(calls):
        threading.Thread(target=run, args=(i, fn), daemon=True, name=f"mmrlvr-server-{i}").start()
    results: list = [None] * len(calls)
    for _ in calls:
        i, ok, value = done.get()
        if not ok:
            raise value
        results[i] = value
    return results


class ServerPool:
    """`rollout`/`generate`/`sync_weights` over several `ServerRolloutEngine`s, one per URL."""

    def __init__(self, engines: Sequence[ServerRolloutEngine]):
        if not engines:
            raise ValueError("a server pool needs at least one server")
        self.engines = list(engines)
        first = self.engines[0]
        self.processor, self.suppress_ids, self.pad_id = first.processor, first.suppress_ids, first.pad_id
        self.stop_ids = first.stop_ids
        self.urls = [e.url for e in self.engines]
        for e in self.engines[1:]:
            wrong = setting_differences(first.info, e.info)
            if wrong:
                raise RolloutServerError(f"rollout servers {first.url} and {e.url} sample with other settings ("
                                         + "; ".join(wrong) + "): start every server with the training config's model.* values")
        self.base = [e.version for e in self.engines]  # each server's count when this run connected

    @classmethod
    def connect(cls, urls: Sequence[str], processor, model_config, **kw) -> "ServerPool":
        """One client per URL (each checks its server against the learner), asked at once."""
        return cls(at_once([lambda u=u: ServerRolloutEngine(u, processor, model_config, **kw) for u in urls]))

    # ------------------------------------------------------------------------------- versions
    @property
    def version(self) -> int:
        return self.agreed("version")

    @property
    def synced_version(self) -> int:
        return self.agreed("synced_version")

    def agreed(self, what: str = "version") -> int:
        """The first server's `what`, once every server has moved by as many updates; else one line."""
        moved = [getattr(e, what) - b for e, b in zip(self.engines, self.base)]
        if len(set(moved)) > 1:
            counts = ", ".join(f"{e.url} at {getattr(e, what)} ({m:+d})" for e, m in zip(self.engines, moved))
            raise RolloutServerError(f"rollout servers disagree on the policy version ({counts} since this run "
                                     "connected): one missed an update or another client loaded weights; restart them "
                                     "and resume from the last checkpoint")
        return getattr(self.engines[0], what)

    # -------------------------------------------------------------------------------- sampling
    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        return self.rollout(samples, group_size, sampling, seed).completions

    def rollout(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
                max_new_tokens: int | None = None, return_logprobs: bool = False) -> RolloutOutput:
        """G completions per prompt, groups spread over the servers, in the prompts' order."""
        first = self.engines[0]
        requests, fields = first.requests(samples, group_size, sampling, seed, greedy, max_new_tokens)
        prompt_inputs = encode_prompts(self.processor, samples)
        lengths = prompt_inputs["attention_mask"].sum(dim=1).tolist()
        max_tokens = fields[0]["max_tokens"] if fields else 0
        parts = spread(expected_tokens(lengths, max_tokens, group_size), len(self.engines), _rank_world()[0])
        busy = [(e, p) for e, p in zip(self.engines, parts) if p]
        answers = at_once([lambda e=e, p=p: e.sample_raw([requests[i] for i in p], [fields[i] for i in p], group_size)
                           for e, p in busy])
        raw: list = [None] * len(samples)
        for (_, p), got in zip(busy, answers):
            for i, outs in zip(p, got):
                raw[i] = outs
        out = rollout_output(self.processor, samples, raw, self.pad_id, return_logprobs, prompt_inputs=prompt_inputs)
        out.policy_version = self.version
        return out

    # ------------------------------------------------------------------------------ weight sync
    def sync_weights(self, model) -> None:
        """Exactly one update per server, from the one process that syncs; the other ranks read the versions.
        A sharded policy (FSDP2) broadcast to the servers: every rank joins each server's bucket gathers."""
        rank, world = _rank_world()
        if gathers_by_bucket(self.engines, model):
            sync_sharded(self.engines, model)
        else:
            pairs = sync_pairs_of(model)
            if rank == 0:
                for e in self.engines:
                    e.push(pairs)
        if world > 1:
            import torch.distributed as dist

            dist.barrier()
        if rank != 0:
            at_once([e.read_version for e in self.engines])
        self.agreed("synced_version")

    def close(self) -> None:
        for e in self.engines:
            e.close()
