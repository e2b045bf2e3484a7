"""A DeepSpeed ZeRO-3 trainer (a real `deepspeed.initialize` with `zero_optimization.stage: 3` over a
two-process gloo world, DeepSpeed's CPU accelerator) syncs through the real client by broadcast, twice
(the second after an update written through `GatheredParameters(modifier_rank=0)`): every stand-in
server receives every tensor whole, bit for bit, and no rank ever holds more gathered bytes at once
than one bucket of its server. The whole-tensor path (`sync_pairs(model)`, used by the file and upload
syncs and the colocated engine) returns the same weights, gathered one parameter at a time.

Skipped where deepspeed is not installed (the project's CI: it is not a dependency of mmrlvr).

The bound, by hand (as in `test_server_sharded_sync.py`): the tiny policy holds 4,351,232 bytes in 105
float32 tensors, the largest 310,272; with 512 KiB (and 384 KiB) buckets a rank that gathers one bucket
at a time holds at most 524,288 (393,216) gathered bytes at once, where gathering first holds all."""

from __future__ import annotations

import os

import pytest
import torch

from tests.rollout.conftest import main_env_only
from tests.rollout.test_server_sharded_sync import (
    KEY, LARGEST, MODEL_BYTES, TIMEOUT, ChannelStandIn, _info, _same_bits, _whole_pairs, run_two_ranks,
)

pytest.importorskip("deepspeed", reason="deepspeed is not installed (not a dependency of mmrlvr)")
pytestmark = main_env_only


def _gathered_bytes(params) -> int:
    """Bytes the partitioned parameters hold whole right now (a released one holds an empty placeholder)."""
    return sum(p.data.numel() * p.data.element_size() for p in params)


def _trainer(rank: int, port: int, urls: list[str], out) -> None:
    """One ZeRO-3 rank: partition the tiny policy over both ranks, check the whole-tensor path, then
    sync twice through the client, recording the gathered bytes alive at every gather."""
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import deepspeed
    import torch.distributed as dist

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.server import ServerRolloutEngine
    from mmrlvr.rollout.server_pool import ServerPool
    from mmrlvr.rollout.weight_names import sync_pairs

    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    model, processor = load_policy("tiny")
    before = dict(sync_pairs(model))
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
              "zero_allow_untested_optimizer": True}
    engine, *_ = deepspeed.initialize(model=model, config=config,
                                      optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    params = list(engine.module.parameters())
    assert all(hasattr(p, "ds_id") and p.numel() == 0 for p in params)  # partitioned: placeholders
    whole_ok = _same_bits(dict(sync_pairs(engine)), before) and _gathered_bytes(params) == 0
    gathers, peak = [0], [0]
    real = deepspeed.zero.GatheredParameters.__enter__

    def counted(self):
        real(self)
        gathers[0] += len(self.params)
        peak[0] = max(peak[0], _gathered_bytes(params))

    deepspeed.zero.GatheredParameters.__enter__ = counted
    engines = [ServerRolloutEngine(u, processor, model.config, key=KEY, weight_sync="broadcast", timeout=TIMEOUT)
               for u in urls]
    client = engines[0] if len(engines) == 1 else ServerPool(engines)
    client.sync_weights(engine)
    deepspeed.zero.GatheredParameters.__enter__ = real
    with deepspeed.zero.GatheredParameters(params, modifier_rank=0), torch.no_grad():
        if rank == 0:  # an update: every weight + 1, broadcast from rank 0 and partitioned again on exit
            for p in params:
                p.add_(1.0)
    deepspeed.zero.GatheredParameters.__enter__ = counted
    client.sync_weights(engine)
    out.put((rank, whole_ok, peak[0], gathers[0], client.synced_version, _gathered_bytes(params)))
    dist.destroy_process_group()


def _sync(buckets: list[int]):
    """Two ZeRO-3 ranks sync twice to one stand-in per bucket size: (stand-ins, expected, {rank: results})."""
    from mmrlvr.models.load import load_policy
    from tests.rollout.conftest import free_port

    model, processor = load_policy("tiny")
    servers = [ChannelStandIn(_info(model, processor), b) for b in buckets]
    got = run_two_ranks(_trainer, free_port(), servers)
    print(f"buckets {buckets}: (rank, whole ok, peak gathered bytes, gathers, version, left gathered) {sorted(got)}")
    return servers, dict(_whole_pairs(model)), {rank: rest for rank, *rest in got}


@pytest.mark.parametrize("buckets", [[512 * 1024], [384 * 1024, 512 * 1024]], ids=["one-server", "pool"])
def test_a_zero3_trainer_syncs_through_the_client_one_bucket_at_a_time(buckets):
    servers, expected, ranks = _sync(buckets)
    for s in servers:
        assert len(s.received) == 2 and _same_bits(s.received[0], expected)
        assert _same_bits(s.received[1], {n: t + 1 for n, t in expected.items()})  # the update's weights
    for rank in (0, 1):
        whole_ok, peak, gathers, version, left = ranks[rank]
        assert whole_ok  # sync_pairs(model): every weight whole, bit for bit, each released after its copy
        assert gathers == 2 * len(buckets) * 105  # each tensor gathered once per server per sync, on both ranks
        assert LARGEST <= peak <= max(buckets) < MODEL_BYTES, (rank, peak)
        assert version == 2 and left == 0  # nothing stays gathered after the syncs
