"""Rollouts from a `mmrlvr rollout-server` (`rollout.engine: vllm_server`): the HF engine's contract over HTTP.

The server runs vLLM (on its own GPUs, node, or CPU cores); this side never imports vLLM. Each
rollout sends the chat-templated prompts with their media decoded as the learner decodes them,
and the per-request sampling fields the colocated engine would use (`vllm_inputs.sampling_fields`:
same seeds, temperature, top-p/top-k, stop ids); the server adds the allowed ids and processed
log-probs. What comes back is checked (`server_wire.decode_outputs`) and assembled exactly as the
colocated engine assembles vLLM's outputs (`vllm_inputs.rollout_output`).

Weight sync after each update (`rollout.weight_sync`, chosen by the platform under `auto`): the
policy's weights (LoRA merged, `weight_names.sync_pairs`) are broadcast over NCCL into the
server's vLLM worker when they live on a GPU, as TRL and verl do (`weight_channel`, a two-rank
group of its own); on the CPU they travel as one safetensors file, written to shared memory and
loaded by path when the server is on this machine (its address is loopback), or uploaded in the
request body otherwise. The server then resets its prefix and encoder caches. A sharded policy
(FSDP2 DTensors, DeepSpeed ZeRO-3 parameters) on the broadcast path is gathered one bucket at a time
by every rank (`sync_sharded`), never whole; the file and upload paths write whole tensors, so they
gather everything first.

The server obeys only its trainer: every POST carries the key (`rollout.server_key` or
MMRLVR_ROLLOUT_KEY, `server_key`), and the policy version it reports must be the one this trainer's
own syncs made; a version that moved otherwise means another writer, and the run stops with one line.

Several servers (`rollout.server_url` a list): `server_pool.ServerPool` holds one of these per address and
uses its parts (`requests`, `sample_raw`, `push`, `read_version`) to spread groups and sync each server once.
"""

from __future__ import annotations

import os
import tempfile
import threading
import urllib.parse
from typing import Sequence

from mmrlvr.data.collate import prompt_texts
from mmrlvr.rollout.base import RolloutOutput
from mmrlvr.rollout.generation import stop_token_ids, vision_token_ids
from mmrlvr.rollout.server_http import RolloutServerError, call
from mmrlvr.rollout.server_key import client_key
from mmrlvr.rollout.server_wire import decode_outputs, encode_request
from mmrlvr.rollout import weight_channel
from mmrlvr.rollout.vllm_inputs import (
    model_vocab_size, processor_kwargs, request_seeds, rollout_output, sampling_fields, vllm_request,
)
from mmrlvr.rollout.weight_names import sync_pairs
from mmrlvr.rollout.zero3 import partitioned
from mmrlvr.types import Completion, Sample

LOOPBACK = ("127.0.0.1", "localhost", "::1")
WEIGHT_SYNCS = ("auto", "file", "upload", "broadcast")


def weight_transport(setting: str, device, local: bool) -> str:
    """How weights reach the server: `auto` broadcasts from a GPU (NCCL), else writes a file in shared
    memory for a server on this machine, else uploads it; any other setting is taken as it is."""
    if setting != "auto":
        return setting
    if weight_channel.channel_backend(device) == "nccl":
        return "broadcast"
    return "file" if local else "upload"


def info_mismatches(info: dict, *, model_type: str, vocab_size: int, suppress_ids, pixel_kwargs: dict, dtype: str | None) -> list[str]:
    """What the server samples differently from the learner (empty: nothing): each 'what: server x, learner y'."""
    out = []
    for what, theirs, ours in (("model family", info.get("model_type"), model_type),
                               ("vocabulary size", info.get("vocab_size"), vocab_size),
                               ("suppressed token ids", sorted(info.get("suppress_ids") or []), sorted(suppress_ids)),
                               ("pixel limits", info.get("processor_kwargs"), pixel_kwargs),
                               ("dtype", info.get("dtype"), dtype)):
        if ours is not None and theirs != ours:
            out.append(f"{what}: server {theirs!r}, learner {ours!r}")
    return out


class ServerRolloutEngine:
    """`rollout`/`generate`/`sync_weights` as `HFRolloutEngine`, sampling on a rollout server.

    `version` is the server's policy version (weight updates it has loaded) after the last call,
    `synced_version` the one the last `sync_weights` made (the learner's current weights)."""

    def __init__(self, url: str, processor, model_config, *, timeout: float = 600.0, dtype: str | None = None,
                 generation_config=None, weight_sync: str = "auto", key: str | None = None):
        if weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"rollout.weight_sync: expected one of {', '.join(WEIGHT_SYNCS)}, got {weight_sync!r}")
        self.weight_sync = weight_sync
        self._channel = None  # the broadcast group, opened at the first broadcast sync
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.key = client_key(key)
        self.processor = processor
        tok = processor.tokenizer
        self.model_type = model_config.model_type
        self.suppress_ids = vision_token_ids(tok, self.model_type)
        self.stop_ids = stop_token_ids(tok, generation_config)  # the HF engine's stop ids (its EOS ids included)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]
        self.vocab_size = model_vocab_size(model_config)
        self.local = urllib.parse.urlsplit(self.url).hostname in LOOPBACK
        info = self._call("/info")
        self.info = info  # what it samples with: a server pool compares its servers' by it
        wrong = info_mismatches(info, model_type=self.model_type, vocab_size=self.vocab_size,
                                suppress_ids=self.suppress_ids, pixel_kwargs=processor_kwargs(processor), dtype=dtype)
        if wrong:
            raise RolloutServerError(f"rollout server {self.url} samples from other settings than the learner ("
                                     + "; ".join(wrong) + "): start it with the training config's model.* values")
        self.version = self._version(info, "/info")
        self.synced_version = self.version  # the version of the learner's weights, after the last sync

    def _call(self, path: str, payload: dict | None = None, **kw) -> dict:
        return call(self.url, path, payload=payload, timeout=self.timeout, key=self.key, **kw)

    def _version(self, answer: dict, path: str, expected: int | None = None) -> int:
        """The policy version in `answer`: an integer >= 0, equal to `expected` when one is known; else one line."""
        v = answer.get("version")
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise RolloutServerError(f"rollout server {self.url}: malformed {path} answer "
                                     f"(version {str(v)[:40]!r} is not an integer >= 0)")
        if expected is not None and v != expected:
            raise RolloutServerError(
                f"rollout server {self.url}: its policy version is {v} where this trainer's syncs make it {expected}: "
                "another client loaded weights into it; give each run its own server (and key)")
        return v

    # -------------------------------------------------------------------------------- sampling
    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        return self.rollout(samples, group_size, sampling, seed).completions

    def rollout(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
                max_new_tokens: int | None = None, return_logprobs: bool = False) -> RolloutOutput:
        """Sample G completions per prompt on the server; `return_logprobs`: (N, T) processed sampler log-probs."""
        requests, fields = self.requests(samples, group_size, sampling, seed, greedy, max_new_tokens)
        raw = self.sample_raw(requests, fields, group_size)
        out = rollout_output(self.processor, samples, raw, self.pad_id, return_logprobs)
        out.policy_version = self.version
        return out

    def requests(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
                 max_new_tokens: int | None = None) -> tuple[list[dict], list[dict]]:
        """The /generate body's two lists for `samples`: encoded prompts, and sampling fields with each
        prompt's seed by its place in `samples` (a server pool sends any subset of them unchanged)."""
        texts = prompt_texts(self.processor, samples)
        requests = [encode_request(vllm_request(t, s, self.processor)) for t, s in zip(texts, samples)]
        fields = [sampling_fields(sampling, group_size, s, greedy, max_new_tokens, self.stop_ids)
                  for s in request_seeds(seed, len(samples), group_size)]
        return requests, fields

    def sample_raw(self, requests: list[dict], fields: list[dict], group_size: int) -> list:
        """POST /generate; the checked completions per prompt, with the server's version checked too."""
        answer = self._call("/generate", {"requests": requests, "sampling": fields})
        raw = decode_outputs(answer.get("outputs"), len(requests), group_size, self.url, self.vocab_size,
                             max_tokens=fields[0]["max_tokens"] if fields else None, suppress_ids=self.suppress_ids,
                             tokenizer=self.processor.tokenizer)
        self.version = self._version(answer, "/generate", self.synced_version)
        return raw

    # ------------------------------------------------------------------------------ weight sync
    def close(self) -> None:
        """Nothing to release: each request opens its own connection; the server is the user's."""

    def sync_weights(self, model) -> None:
        """Send the policy's current weights; the server's next generation uses them.

        With several training processes every rank gathers the weights (a collective under FSDP)
        but rank 0 alone sends them; the others wait for it and read the new policy version. A
        sharded policy (FSDP2, ZeRO-3) on the broadcast path is gathered one bucket at a time (`sync_sharded`)."""
        rank, world = _rank_world()
        if gathers_by_bucket([self], model):
            sync_sharded([self], model)
        else:
            pairs = sync_pairs_of(model)
            if rank == 0:
                self.push(pairs)
        if world > 1:
            import torch.distributed as dist

            dist.barrier()
        if rank != 0:  # rank 0 checked the version its update made
            self.read_version()

    def push(self, pairs) -> None:
        """Send `pairs` (the one process that syncs) and check the server counted exactly this one update."""
        device = pairs[0][1].device if pairs else "cpu"
        transport = weight_transport(self.weight_sync, device, self.local)
        answer = self._broadcast(pairs) if transport == "broadcast" else self._send_file(pairs, transport)
        self.version = self.synced_version = self._version(answer, "/update_weights", self.synced_version + 1)

    def read_version(self) -> int:
        """The other ranks: the version the syncing process's update made, as the server reports it."""
        self.version = self.synced_version = self._version(self._call("/health"), "/health")
        return self.version

    def _send_file(self, pairs, transport: str) -> dict:
        """One safetensors file: loaded by path from shared memory (`file`) or sent as the body (`upload`)."""
        from safetensors.torch import save_file

        tensors = {n: t.cpu().contiguous().clone() for n, t in pairs}
        root = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.TemporaryDirectory(prefix="mmrlvr-sync-", dir=root) as d:
            file = os.path.join(d, "model.safetensors")
            save_file(tensors, file)
            os.chmod(d, 0o755)  # the server may run as another user on this machine
            if transport == "file":
                return self._call("/update_weights", {"path": d})
            with open(file, "rb") as f:
                return self._call("/update_weights_upload", data=f.read())

    def _broadcast(self, pairs) -> dict:
        """Broadcast the tensors into the server's worker over the weight channel (opened once)."""
        self.open_channel(pairs)
        spec = weight_channel.spec_of(pairs)
        try:
            return _alongside(lambda: self._call("/update_weights_channel", {"spec": spec}),
                              lambda: weight_channel.send(self._channel, pairs))[0]
        except BaseException:
            self._channel = None  # a broken broadcast leaves the group unusable: the next sync reopens it
            raise

    def open_channel(self, pairs) -> int:
        """Open the weight channel to this server unless it is open (the server hosts the store, both
        sides join); the bucket size its server published, which every sending rank must cut by."""
        device = pairs[0][1].device if pairs else "cpu"
        if self._channel is None:
            backend = weight_channel.channel_backend(device)
            answer = self._call("/weight_channel", {"backend": backend, "timeout": self.timeout})
            port = answer.get("port")
            if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
                raise RolloutServerError(f"rollout server {self.url}: malformed /weight_channel answer "
                                         f"(port {str(port)[:40]!r} is not an integer in [1, 65535])")
            host = urllib.parse.urlsplit(self.url).hostname
            store = _joined_store(self.url, host, port, self.timeout)
            self._channel = _alongside(lambda: self._call("/weight_channel/join", {}),
                                       lambda: weight_channel.open_group(store, weight_channel.CLIENT_RANK, backend,
                                                                         self.timeout, host))[1]
        return weight_channel.bucket_limit(self._channel)


def sync_pairs_of(model) -> list:
    """The (name, tensor) pairs a sync sends: every rank gathers them (a collective under FSDP)."""
    return [(n, t.detach()) for n, t in sync_pairs(model)]


def gathers_by_bucket(engines, model) -> bool:
    """Whether a sync to `engines` gathers one bucket at a time: the policy's parameters are FSDP2 shards
    (DTensors) or ZeRO-3 partitions (`ds_id`) and every server is synced by broadcast (a file or an
    upload holds whole tensors)."""
    param = next(iter(model.parameters()), None)
    if param is None or not (hasattr(param, "full_tensor") or partitioned(param)):
        return False
    return all(weight_transport(e.weight_sync, param.device, e.local) == "broadcast" for e in engines)


def sync_sharded(engines, model) -> None:
    """Every trainer rank's part of a sharded broadcast: rank 0 sends to each server in list order and
    the other ranks join each of those sends' gathers (`weight_channel.send(None, ...)`), so no rank holds
    more than its shard and one bucket of gathered tensors. Every gather is a collective, so all ranks
    cut the same buckets: rank 0 opens the channels first and hands each server's bucket size round."""
    pairs = sync_pairs(model, gather=False)
    rank, world = _rank_world()
    limits = [e.open_channel(pairs) for e in engines] if rank == 0 else [None] * len(engines)
    if world > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(limits, src=0)
    for e, limit in zip(engines, limits):
        if rank == 0:
            e.push(pairs)
        else:
            weight_channel.send(None, pairs, limit)


def _joined_store(url: str, host: str, port: int, timeout: float):
    """`weight_channel.join_store` within `timeout` seconds: TCPStore's own timeout does not bound a port
    that accepts and never speaks, so the join runs in a thread this side stops waiting for."""
    box: dict = {}

    def run():
        try:
            box["store"] = weight_channel.join_store(host, port, timeout)
        except BaseException as exc:  # noqa: BLE001 - reported below as one line
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name="mmrlvr-join-store")
    thread.start()
    thread.join(timeout)
    if "store" in box:
        return box["store"]
    why = "no answer in time" if thread.is_alive() else f"{type(box['error']).__name__}: {str(box['error']).splitlines()[0][:200] if str(box['error']) else ''}"
    raise RolloutServerError(f"rollout server {url}: the weight channel's store at {host}:{port} cannot be joined ({why})")


def _alongside(request, local):
    """Run `request` (an HTTP call the server answers after its side of a collective) in a thread
    while `local` (this side of it) runs here; returns both results, raising the request's error first."""
    box: dict = {}

    def run():
        try:
            box["answer"] = request()
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        mine = local()
    except BaseException:
        thread.join()
        if "error" in box:
            raise box["error"]
        raise
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["answer"], mine


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
