"""A private process group that broadcasts the policy's weights from the trainer to the rollout server's workers.

The way TRL's `vllm-serve` and verl's rollout workers move weights between GPUs: the trainer's
rank 0 and every worker of the server (each tensor-parallel shard of each data-parallel replica)
form a process group of their own (not the trainer's DDP world): 1 trainer + N workers, the trainer
rank 0, worker i rank 1 + i. After each update the trainer broadcasts every tensor once and every
worker receives it whole (vLLM's loader cuts out its own shard). The
backend is the platform's: NCCL when the weights are on CUDA, gloo on the CPU (where it serves a
server on this machine; across CPU machines the safetensors upload is the transport). Both sides
import only torch, so the trainer needs no vLLM.

The group is made from a `TCPStore` the server hosts (its port picked by the OS and handed to the
client over HTTP), so no global `init_process_group` is touched. The server publishes the group's
size and its bucket size in that store (`publish`), so the trainer learns both when it joins and
the two sides always cut the same buckets; a store without them means 2 ranks and `BUCKET_BYTES`. Tensors travel as their raw bytes
in flat buckets: one broadcast per bucket, any dtype (bfloat16 included), bit for bit.

Shapes: a spec is `[name, dtype, shape]` per tensor, in send order; a bucket is a flat uint8 tensor.
Sharded trainers (FSDP2 DTensors, ZeRO-3 parameters: `weight_names.sync_pairs(model, gather=False)`)
gather one bucket's tensors at a time inside `send` (ZeRO-3's through `zero3.gathered`), so no rank
ever holds a full unsharded copy; the trainer ranks outside the group call `send(None, pairs)` to
take part in those gathers.
"""

from __future__ import annotations

import datetime
from typing import Iterable, Sequence

import torch

from mmrlvr.rollout.zero3 import full_shape, gathered, partitioned

BUCKET_BYTES = 256 * 2**20  # one broadcast moves at most this much (verl buckets its sync the same way)
MAX_BUCKET_BYTES = 2 * 2**30  # the most a bucket may hold: a transient copy far below a 7B model's 14 GiB
SERVER_RANK, CLIENT_RANK = 1, 0  # the trainer is the source; worker i of the server is rank SERVER_RANK + i
WORLD_KEY, BUCKET_KEY = "mmrlvr_world_size", "mmrlvr_bucket_bytes"
_LIMITS: dict[int, int] = {}  # id(group) -> the bucket size its store published


def bucket_problem(nbytes: int) -> str | None:
    """Why a bucket size is refused (None: accepted): at least 1 MiB, at most MAX_BUCKET_BYTES."""
    if not 2**20 <= nbytes <= MAX_BUCKET_BYTES:
        return f"a weight bucket must hold 1 to {MAX_BUCKET_BYTES // 2**20} MiB, got {nbytes / 2**20:g} MiB"
    return None


def publish(store, world_size: int, bucket_bytes: int = BUCKET_BYTES) -> None:
    """The server's side: the group's size (1 trainer + workers) and bucket size, read by every `open_group`."""
    store.set(WORLD_KEY, str(int(world_size)))
    store.set(BUCKET_KEY, str(int(bucket_bytes)))


def _published(store, key: str, default: int) -> int:
    return int(store.get(key).decode()) if store.check([key]) else default


def channel_backend(device: torch.device | str) -> str:
    """NCCL between GPUs, gloo on the CPU: the platform chooses, not the user."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def host_store(host: str, timeout_s: float) -> torch.distributed.TCPStore:
    """The server's side of the rendezvous: a store on a free port of `host`, not yet waiting for the client."""
    import torch.distributed as dist

    return dist.TCPStore(host, 0, 2, True, datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


def join_store(host: str, port: int, timeout_s: float) -> torch.distributed.TCPStore:
    """The trainer's side: the store the server hosts at `host:port`."""
    import torch.distributed as dist

    return dist.TCPStore(host, int(port), 2, False, datetime.timedelta(seconds=timeout_s))


def open_group(store, rank: int, backend: str, timeout_s: float, host: str = "127.0.0.1"):
    """The process group over `store` (its size as the server published it, else 2); every member
    must call it (it rendezvouses).

    gloo binds its sockets to `host` (the loopback address for a server on this machine), never to
    whatever the machine's hostname resolves to."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    world = _published(store, WORLD_KEY, 2)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        group = dist.ProcessGroupGloo(store, rank, world, opts)
    elif backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        group = dist.ProcessGroupNCCL(store, rank, world, opts)
    else:
        raise ValueError(f"unknown weight-channel backend {backend!r} (nccl or gloo)")
    _LIMITS[id(group)] = _published(store, BUCKET_KEY, BUCKET_BYTES)
    return group


def bucket_limit(group) -> int:
    """The bucket size `group`'s store published (BUCKET_BYTES for a group made elsewhere)."""
    return _LIMITS.get(id(group), BUCKET_BYTES)


def spec_of(pairs: Sequence[tuple[str, torch.Tensor]]) -> list[list]:
    """`[name, dtype, shape]` per tensor: what the receiver allocates before the broadcast."""
    return [[n, str(t.dtype).removeprefix("torch."), full_shape(t)] for n, t in pairs]


def buckets(spec: Sequence[Sequence], limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices of the tensors each broadcast carries: in order, each bucket at most `limit` bytes
    unless one tensor alone is larger (it then travels alone)."""
    out: list[list[int]] = []
    size = 0
    for i, (_, dtype, shape) in enumerate(spec):
        n = _nbytes(dtype, shape)
        if out and size + n <= limit:
            out[-1].append(i)
            size += n
        else:
            out.append([i])
            size = n
    return out


def send(group, pairs: Sequence[tuple[str, torch.Tensor]], limit: int | None = None) -> None:
    """Broadcast `pairs` (the trainer's side); the receivers were told `spec_of(pairs)`.

    Sharded tensors (FSDP2's DTensors, ZeRO-3's partitioned parameters) are gathered bucket by
    bucket here (a collective: every trainer rank calls `send`, those outside the channel with
    `group=None`, which gathers and sends nothing); a ZeRO-3 bucket is released before its broadcast."""
    spec = spec_of(pairs)
    limit = bucket_limit(group) if limit is None else limit
    for idx in buckets(spec, limit):
        with gathered(pairs[i][1] for i in idx):
            flat = torch.cat([_bytes_of(pairs[i][1]) for i in idx])
        if group is not None:
            group.broadcast(flat, CLIENT_RANK).wait()
        del flat  # this bucket's gathered copy is gone before the next one is made


def receive(group, spec: Sequence[Sequence], device: torch.device | str = "cpu",
            limit: int | None = None) -> Iterable[tuple[str, torch.Tensor]]:
    """Receive the tensors `spec` names (a worker's side), yielding (name, tensor) in order, one
    bucket in memory at a time when the caller consumes them as they come."""
    limit = bucket_limit(group) if limit is None else limit
    for idx in buckets(spec, limit):
        sizes = [_nbytes(spec[i][1], spec[i][2]) for i in idx]
        flat = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
        group.broadcast(flat, CLIENT_RANK).wait()
        for i, part in zip(idx, flat.split(sizes)):
            name, dtype, shape = spec[i]
            dt = _dtype(dtype)
            if part.storage_offset() % torch.empty((), dtype=dt).element_size():
                part = part.clone()  # behind a tensor of a narrower dtype: realigned before the view
            yield name, part.view(dt).reshape(shape)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"weight spec: {name!r} is not a torch dtype")
    return dtype


def _nbytes(dtype: str, shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        if int(s) < 0:
            raise ValueError(f"weight spec: negative size in shape {list(shape)}")
        n *= int(s)
    return n * torch.empty((), dtype=_dtype(dtype)).element_size()


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bytes as a flat uint8 view (a contiguous copy first where needed); a
    sharded tensor (FSDP2's DTensor) is gathered whole first; a ZeRO-3 parameter must be inside its gather."""
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    if partitioned(t) and list(t.shape) != full_shape(t):
        raise RuntimeError(f"ZeRO-3 parameter {t.ds_id} read outside its gather (shape {list(t.shape)})")
    return t.detach().contiguous().reshape(-1).view(torch.uint8)
