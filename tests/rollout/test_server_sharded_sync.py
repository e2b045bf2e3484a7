"""A sharded trainer (FSDP2: `fully_shard` over a two-process gloo world, on the CPU) syncs through the
real client (`ServerRolloutEngine.sync_weights`, and `ServerPool.sync_weights` over two servers) by
broadcast, twice (the second after an update, over the channel the first opened): every server
receives every tensor of the policy whole, bit for bit, and no rank ever holds more gathered
(unsharded) bytes at once than one bucket of its server.

The servers are stand-ins in this (pytest) process: stdlib HTTP answering as `mmrlvr rollout-server`
does, each hosting a real weight channel (its store, a small published bucket, a gloo group) and
receiving with `weight_channel.receive`, as a vLLM worker does; no vLLM. Each stand-in publishes its
own bucket size, so the rank outside the channel must learn it to cut the same buckets.

The bound, by hand: the tiny policy holds 4,351,232 bytes in 105 float32 tensors, the largest
310,272 bytes; with buckets of 512 KiB (and 384 KiB) every bucket holds at most that many bytes, so
a rank that gathers one bucket at a time holds at most 524,288 (393,216) gathered bytes at once, where
gathering everything first holds all 4,351,232."""

from __future__ import annotations

import json
import multiprocessing
import queue
import threading
import time
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from mmrlvr.rollout import weight_channel as wc
from mmrlvr.rollout.server_http import SERVER_NAME
from mmrlvr.rollout.server_key import authorized
from tests.rollout.conftest import main_env_only

pytestmark = main_env_only  # the trainer's side: run once, in the main suite

KEY = "sharded-sync-key"
TIMEOUT = 120.0
MODEL_BYTES, LARGEST = 4_351_232, 310_272


class ChannelStandIn:
    """A rollout server's answers for a broadcast sync: /info, /health, /weight_channel (host the store,
    publish 1 trainer + 1 worker and `bucket` bytes), /weight_channel/join, /update_weights_channel."""

    def __init__(self, info: dict, bucket: int):
        self.info, self.bucket, self.version = info, bucket, 0
        self.received: list[dict] = []  # name -> tensor, one per update
        self.store = self.group = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, obj, code=200):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                self._send({**outer.info, "server": SERVER_NAME, "version": outer.version})

            def do_POST(self):  # noqa: N802
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                if not authorized(self.headers.get("Authorization"), KEY):
                    return self._send({"detail": "missing or wrong key"}, 401)
                if self.path == "/weight_channel":
                    outer.store = wc.host_store("127.0.0.1", TIMEOUT)
                    wc.publish(outer.store, 2, outer.bucket)
                    return self._send({"port": outer.store.port})
                if self.path == "/weight_channel/join":
                    outer.group = wc.open_group(outer.store, wc.SERVER_RANK, "gloo", TIMEOUT)
                    return self._send({"joined": True})
                if self.path == "/update_weights_channel":
                    outer.received.append({n: t.clone() for n, t in wc.receive(outer.group, payload["spec"])})
                    outer.version += 1
                    return self._send({"version": outer.version})
                self._send({"detail": f"no {self.path} here"}, 404)

            def log_message(self, *args):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def _info(model, processor) -> dict:
    from mmrlvr.rollout.hf import vision_token_ids
    from mmrlvr.rollout.vllm_inputs import processor_kwargs

    return {"model_type": model.config.model_type, "vocab_size": model.config.get_text_config().vocab_size,
            "suppress_ids": vision_token_ids(processor.tokenizer, model.config.model_type),
            "processor_kwargs": processor_kwargs(processor), "dtype": "float32"}


def _trainer(rank: int, init: str, urls: list[str], out) -> None:
    """One FSDP2 rank: shard the tiny policy over both ranks, then sync it twice through the client,
    counting the gathered bytes alive at every gather (each gather's storage, watched by a weak ref)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.server import ServerRolloutEngine
    from mmrlvr.rollout.server_pool import ServerPool

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    model, processor = load_policy("tiny")
    fully_shard(model, mesh=init_device_mesh("cpu", (2,)))
    assert all(isinstance(p, DTensor) for p in model.parameters())
    alive: list = []  # (weak ref to a gathered tensor's storage, its bytes)
    peak, gathers = [0], [0]
    real = DTensor.full_tensor

    def counted(self, **kw):
        full = real(self, **kw)
        alive.append((weakref.ref(full.untyped_storage()), full.untyped_storage().nbytes()))
        gathers[0] += 1
        peak[0] = max(peak[0], sum(n for ref, n in alive if ref() is not None))
        return full

    DTensor.full_tensor = counted
    engines = [ServerRolloutEngine(u, processor, model.config, key=KEY, weight_sync="broadcast", timeout=TIMEOUT)
               for u in urls]
    client = engines[0] if len(engines) == 1 else ServerPool(engines)
    client.sync_weights(model)
    with torch.no_grad():  # an update: every shard + 1, then the second sync over the channel the first opened
        for p in model.parameters():
            p.add_(1.0)
    client.sync_weights(model)
    out.put((rank, peak[0], gathers[0], client.synced_version))
    dist.destroy_process_group()


def run_two_ranks(target, setup, servers: list) -> list:
    """Start `target(rank, setup, urls, out)` for ranks 0 and 1 in spawned processes and return what
    each put on `out`, failing at once (not after the timeout) when a rank dies; the processes and
    the stand-ins are stopped whatever happens."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(rank, setup, [s.url for s in servers], out)) for rank in (0, 1)]
    for p in procs:
        p.start()
    try:
        got = []
        deadline = time.monotonic() + TIMEOUT * 2
        while len(got) < len(procs):
            try:
                got.append(out.get(timeout=2))
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not dead, f"a trainer rank exited with {dead}"
                assert time.monotonic() < deadline, "the trainer ranks did not answer in time"
        for p in procs:
            p.join(timeout=TIMEOUT)
        assert [p.exitcode for p in procs] == [0, 0]
        return got
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for s in servers:
            s.stop()


def _sync(tmp_path, buckets: list[int]):
    """Two FSDP2 ranks sync twice to one stand-in per bucket size: (stand-ins, {rank: (peak, gathers, version)})."""
    from mmrlvr.models.load import load_policy

    model, processor = load_policy("tiny")
    servers = [ChannelStandIn(_info(model, processor), b) for b in buckets]
    got = run_two_ranks(_trainer, f"file://{tmp_path / 'rendezvous'}", servers)
    expected = {n: t for n, t in _whole_pairs(model)}
    print(f"buckets {buckets}: (rank, peak gathered bytes, gathers, version) {sorted(got)}")
    return servers, expected, {rank: rest for rank, *rest in got}


def _whole_pairs(model):
    from mmrlvr.rollout.weight_names import sync_pairs

    pairs = sync_pairs(model)
    assert len(pairs) == 105 and sum(t.numel() * t.element_size() for _, t in pairs) == MODEL_BYTES
    assert max(t.numel() * t.element_size() for _, t in pairs) == LARGEST
    return pairs


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same_bits(received: dict, expected: dict) -> bool:
    return list(received) == list(expected) and all(
        received[n].dtype == t.dtype and received[n].shape == t.shape and torch.equal(_bits(received[n]), _bits(t))
        for n, t in expected.items())


def test_a_sharded_trainer_syncs_through_the_client_one_bucket_at_a_time(tmp_path):
    bucket = 512 * 1024
    (server,), expected, ranks = _sync(tmp_path, [bucket])
    assert len(server.received) == 2 and _same_bits(server.received[0], expected)
    assert _same_bits(server.received[1], {n: t + 1 for n, t in expected.items()})  # the update's weights
    for rank in (0, 1):
        peak, gathers, version = ranks[rank]
        assert gathers == 2 * 105  # each tensor gathered once per sync, on both ranks (a collective)
        assert LARGEST <= peak <= bucket < MODEL_BYTES, (rank, peak)
        assert version == 2


def test_a_sharded_trainer_syncs_each_server_of_a_pool_with_its_own_bucket_size(tmp_path):
    """Rank 0 broadcasts to each server in list order; rank 1 joins each server's gathers, cut by that
    server's bucket size (384 KiB, then 512 KiB), so the two ranks' collectives match."""
    small, large = 384 * 1024, 512 * 1024
    servers, expected, ranks = _sync(tmp_path, [small, large])
    for s in servers:
        assert len(s.received) == 2 and _same_bits(s.received[0], expected)
        assert _same_bits(s.received[1], {n: t + 1 for n, t in expected.items()})
    for rank in (0, 1):
        peak, gathers, version = ranks[rank]
        assert gathers == 2 * 2 * 105  # every tensor once per server per sync
        assert LARGEST <= peak <= large < MODEL_BYTES, (rank, peak)
        assert version == 2
