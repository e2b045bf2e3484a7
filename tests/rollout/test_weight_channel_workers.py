"""The weight channel to a server of several workers (tensor-parallel shards x data-parallel
replicas): one group of 1 trainer + N workers, worker i at rank 1 + i, every worker receiving every
tensor bit for bit; the group's size and bucket size reach the trainer through the store. The
one-worker server publishes nothing: its group is the two-rank one it always was.

The workers are real processes here, each running the server's real worker-side code
(`vllm_channel.WeightChannelExtension`) over gloo on 127.0.0.1; vLLM's own part of the worker
(`reload_weights`, which loads the pairs) is replaced by one that records what arrived, as vLLM is
not in this environment (`test_vllm_server_parallel.py` runs the whole thing inside vLLM).
"""

from __future__ import annotations

import multiprocessing
import queue

import torch

from mmrlvr.rollout import weight_channel as wc
from mmrlvr.rollout.vllm_channel import WeightChannelExtension

TIMEOUT = 60.0


class RecordingWorker(WeightChannelExtension):
    """The extension mixed into a worker of vLLM rank `rank`, its loader recording what it is given."""

    def __init__(self, rank: int):
        self.rank, self.loaded = rank, []

    def reload_weights(self, weights_iterator):
        self.loaded = [(n, t.clone()) for n, t in weights_iterator]


def _pairs():
    g = torch.Generator().manual_seed(1)
    return [("q", torch.randn(6, 4, generator=g).to(torch.bfloat16)), ("k", torch.randn(3, generator=g)),
            ("ids", torch.arange(7, dtype=torch.int64)), ("big", torch.randn(40, 9, generator=g))]


def _worker(offset: int, rank: int, workers: int, bucket: int, ports, results) -> None:
    """One server worker: worker 0 hosts the store (its port to the trainer), the others join it."""
    worker = RecordingWorker(rank)
    port = worker.mmrlvr_channel_store("127.0.0.1", TIMEOUT, workers, offset, bucket)
    if port is not None:
        for _ in range(workers + 1):
            ports.put(port)
    else:
        port = ports.get(timeout=TIMEOUT)
    worker.mmrlvr_channel_join("gloo", TIMEOUT, "127.0.0.1", port, offset)
    spec = wc.spec_of(_pairs())
    for _ in range(2):  # the group carries a second update too
        count = worker.mmrlvr_channel_receive(spec)
        results.put((offset + rank, count, [(n, t.view(torch.uint8).tolist() if t.dim() else t.tolist())
                                            for n, t in worker.loaded]))


def test_every_worker_of_every_replica_receives_every_tensor_bit_for_bit():
    """Two replicas of two tensor-parallel workers each: vLLM ranks 0, 1 in each, offsets 0 and 2."""
    ctx = multiprocessing.get_context("spawn")
    ports, results = ctx.Queue(), ctx.Queue()
    bucket = 2**20
    procs = [ctx.Process(target=_worker, args=(offset, rank, 4, bucket, ports, results))
             for offset in (0, 2) for rank in (0, 1)]
    for p in procs:
        p.start()
    try:
        port = ports.get(timeout=TIMEOUT)
        store = wc.join_store("127.0.0.1", port, TIMEOUT)
        group = wc.open_group(store, wc.CLIENT_RANK, "gloo", TIMEOUT)
        assert group.size() == 5 and wc.bucket_limit(group) == bucket  # learned from the store
        for scale in (1, 2):
            pairs = [(n, t * scale) for n, t in _pairs()]
            wc.send(group, pairs)
            want = [(n, t.view(torch.uint8).tolist() if t.dim() else t.tolist()) for n, t in pairs]
            got = sorted(results.get(timeout=TIMEOUT) for _ in procs)
            assert [(i, c) for i, c, _ in got] == [(0, 4), (1, 4), (2, 4), (3, 4)]
            assert all(loaded == want for _, _, loaded in got)
    finally:
        for p in procs:
            p.join(timeout=TIMEOUT)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]


def test_a_one_worker_server_publishes_nothing_and_keeps_the_two_rank_group():
    worker = RecordingWorker(0)
    port = worker.mmrlvr_channel_store("127.0.0.1", TIMEOUT)
    store = wc.join_store("127.0.0.1", port, TIMEOUT)
    assert not store.check([wc.WORLD_KEY]) and not store.check([wc.BUCKET_KEY])
    box: queue.Queue = queue.Queue()
    import threading

    t = threading.Thread(target=lambda: box.put(worker.mmrlvr_channel_join("gloo", TIMEOUT, "127.0.0.1")))
    t.start()
    group = wc.open_group(store, wc.CLIENT_RANK, "gloo", TIMEOUT)
    t.join()
    assert group.size() == 2 and wc.bucket_limit(group) == wc.BUCKET_BYTES
    assert RecordingWorker(1).mmrlvr_channel_store("127.0.0.1", TIMEOUT, 2) is None  # only worker 0 hosts
