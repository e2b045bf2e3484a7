"""The weight channel (`mmrlvr.rollout.weight_channel`): a two-rank group of its own that moves the
policy's tensors bit for bit, in buckets, any dtype; a receiver whose sender never comes stops at
the time-out instead of hanging; `auto` picks the transport from the platform.

Both ends run here over gloo on 127.0.0.1, each in its own thread (the server's end runs inside
vLLM's worker in `test_vllm_server.py`)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from mmrlvr.rollout import weight_channel as wc
from mmrlvr.rollout.server import weight_transport


def _pairs():
    g = torch.Generator().manual_seed(0)
    return [("a", torch.randn(3, 4, generator=g).to(torch.bfloat16)),   # 24 bytes
            ("b", torch.arange(5, dtype=torch.int64) - 2),                 # 40 bytes
            ("c", torch.tensor(2.5)),                                      # 4 bytes, 0-dim
            ("d", torch.randn(4, 7, generator=g).t())]                     # 112 bytes, not contiguous


def _groups(timeout=20.0):
    store = wc.host_store("127.0.0.1", timeout)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("server", wc.open_group(store, wc.SERVER_RANK, "gloo", timeout)))
    t.start()
    client = wc.open_group(wc.join_store("127.0.0.1", store.port, timeout), wc.CLIENT_RANK, "gloo", timeout)
    t.join()
    return box["server"], client, store


def test_buckets_keep_order_and_the_byte_limit():
    spec = wc.spec_of(_pairs())
    assert spec[0] == ["a", "bfloat16", [3, 4]] and spec[2] == ["c", "float32", []]
    assert wc.buckets(spec, limit=40) == [[0], [1], [2], [3]]  # 24+40 > 40; 40+4 > 40; 4+112 > 40
    assert wc.buckets(spec, limit=64) == [[0, 1], [2], [3]]    # 24+40 = 64 fits exactly
    assert wc.buckets(spec, limit=180) == [[0, 1, 2, 3]]       # 180 bytes in all
    assert wc.buckets(spec, limit=179) == [[0, 1, 2], [3]]


@pytest.mark.parametrize("limit", [40, 64, wc.BUCKET_BYTES])
def test_tensors_arrive_bit_for_bit_in_order(limit):
    pairs = _pairs()
    server, client, _store = _groups()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("pairs", list(wc.receive(server, wc.spec_of(pairs), limit=limit))))
    t.start()
    wc.send(client, pairs, limit=limit)
    t.join()
    assert [n for n, _ in got["pairs"]] == ["a", "b", "c", "d"]
    for (_, sent), (_, came) in zip(pairs, got["pairs"]):
        assert came.dtype == sent.dtype and came.shape == sent.shape
        assert torch.equal(came.view(torch.uint8) if came.dim() else came, sent.contiguous().view(torch.uint8)
                           if sent.dim() else sent)


def test_a_receiver_whose_sender_never_sends_stops_at_the_timeout():
    server, _client, _store = _groups(timeout=2.0)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        list(wc.receive(server, [["w", "float32", [8]]]))
    assert time.monotonic() - t0 < 30


def test_a_spec_with_a_non_dtype_is_refused():
    with pytest.raises(ValueError, match="not a torch dtype"):
        wc.buckets([["w", "Tensor", [2]]])


def test_auto_picks_the_transport_from_the_platform():
    assert weight_transport("auto", torch.device("cuda", 0), local=True) == "broadcast"
    assert weight_transport("auto", torch.device("cuda", 0), local=False) == "broadcast"
    assert weight_transport("auto", torch.device("cpu"), local=True) == "file"
    assert weight_transport("auto", torch.device("cpu"), local=False) == "upload"
    assert weight_transport("broadcast", torch.device("cpu"), local=True) == "broadcast"
    assert wc.channel_backend("cuda") == "nccl" and wc.channel_backend("cpu") == "gloo"
