"""A sharded trainer's broadcast (FSDP2's DTensors, `weight_names.sync_pairs(model, gather=False)`):
`weight_channel.send` gathers one bucket's tensors, broadcasts that bucket, and only then gathers
the next, so no rank ever holds the whole unsharded model; the rank outside the channel takes part
in the gathers with `send(None, pairs)`; the worker receives every tensor whole, bit for bit.

Two trainer processes (a gloo world, each holding half of every tensor as a real DTensor) and the
worker's side in a thread of rank 0, over 127.0.0.1."""

from __future__ import annotations

import multiprocessing
import threading

import torch

from mmrlvr.rollout import weight_channel as wc
from tests.rollout.conftest import main_env_only

pytestmark = main_env_only  # the trainer's side: run once, in the main suite

TIMEOUT = 60.0
BUCKET = 64 * 4  # bytes: tensors a (32 floats) and b (32 floats) share a bucket, c (64 floats) travels alone


def _full():
    g = torch.Generator().manual_seed(3)
    return [("a", torch.randn(8, 4, generator=g)), ("b", torch.randn(4, 8, generator=g)), ("c", torch.randn(16, 4, generator=g))]


class _Logged:
    """The channel's group, each broadcast logged."""

    def __init__(self, group, log):
        self.group, self.log = group, log

    def broadcast(self, tensor, root):
        self.log.append("broadcast")
        return self.group.broadcast(tensor, root)


def _trainer(rank: int, init: str, out) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    pairs = [(n, distribute_tensor(t, mesh, [Shard(0)])) for n, t in _full()]
    assert all(p.to_local().shape[0] == t.shape[0] // 2 for (_, p), (_, t) in zip(pairs, _full()))
    if rank == 1:
        wc.send(None, pairs, limit=BUCKET)  # gathers only
        dist.destroy_process_group()
        return
    log: list = []
    real = DTensor.full_tensor
    DTensor.full_tensor = lambda self, **kw: (log.append("gather"), real(self, **kw))[1]
    store = wc.host_store("127.0.0.1", TIMEOUT)
    got: dict = {}

    def worker():
        group = wc.open_group(wc.join_store("127.0.0.1", store.port, TIMEOUT), wc.SERVER_RANK, "gloo", TIMEOUT)
        got["pairs"] = [(n, t.clone()) for n, t in wc.receive(group, wc.spec_of(pairs), limit=BUCKET)]

    t = threading.Thread(target=worker)
    t.start()
    group = wc.open_group(store, wc.CLIENT_RANK, "gloo", TIMEOUT)
    wc.send(_Logged(group, log), pairs, limit=BUCKET)
    t.join()
    out.put((log, [(n, v.tolist()) for n, v in got["pairs"]]))
    dist.destroy_process_group()


def test_a_sharded_trainer_gathers_one_bucket_at_a_time_and_the_worker_gets_whole_tensors(tmp_path):
    assert wc.spec_of([(n, t) for n, t in _full()])[0] == ["a", "float32", [8, 4]]
    assert wc.buckets(wc.spec_of(_full()), BUCKET) == [[0, 1], [2]]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [ctx.Process(target=_trainer, args=(rank, init, out)) for rank in (0, 1)]
    for p in procs:
        p.start()
    log, received = out.get(timeout=TIMEOUT * 2)
    for p in procs:
        p.join(timeout=TIMEOUT)
    assert [p.exitcode for p in procs] == [0, 0]
    assert log == ["gather", "gather", "broadcast", "gather", "broadcast"]
    assert received == [(n, t.tolist()) for n, t in _full()]
