"""A private two-process group that broadcasts the policy's weights from the trainer to the rollout server.

The way TRL's `vllm-serve` and verl's rollout workers move weights between GPUs: the trainer's
rank 0 and the server's worker form a process group of their own (not the trainer's DDP world), and
after each update the trainer broadcasts every tensor while the server receives it in place. The
backend is the platform's: NCCL when the weights are on CUDA, gloo on the CPU (where it serves a
server on this machine; across CPU machines the safetensors upload is the transport). Both sides
import only torch, so the trainer needs no vLLM.

The group is made from a `TCPStore` the server hosts (its port picked by the OS and handed to the
client over HTTP), so no global `init_process_group` is touched. Tensors travel as their raw bytes
in flat buckets: one broadcast per bucket, any dtype (bfloat16 included), bit for bit.

Shapes: a spec is `[name, dtype, shape]` per tensor, in send order; a bucket is a flat uint8 tensor.
"""

from __future__ import annotations

import datetime
from typing import Iterable, Sequence

import torch

BUCKET_BYTES = 256 * 2**20  # one broadcast moves at most this much (verl buckets its sync the same way)
SERVER_RANK, CLIENT_RANK = 1, 0  # the trainer is the source


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
    """A two-rank process group over `store`; both sides must call it (it rendezvouses).

    gloo binds its sockets to `host` (the loopback address for a server on this machine), never to
    whatever the machine's hostname resolves to."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        return dist.ProcessGroupGloo(store, rank, 2, opts)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, 2, opts)
    raise ValueError(f"unknown weight-channel backend {backend!r} (nccl or gloo)")


def spec_of(pairs: Sequence[tuple[str, torch.Tensor]]) -> list[list]:
    """`[name, dtype, shape]` per tensor: what the receiver allocates before the broadcast."""
    return [[n, str(t.dtype).removeprefix("torch."), list(t.shape)] for n, t in pairs]


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


def send(group, pairs: Sequence[tuple[str, torch.Tensor]], limit: int = BUCKET_BYTES) -> None:
    """Broadcast `pairs` (the trainer's side); the receiver was told `spec_of(pairs)`."""
    spec = spec_of(pairs)
    for idx in buckets(spec, limit):
        flat = torch.cat([_bytes_of(pairs[i][1]) for i in idx])
        group.broadcast(flat, CLIENT_RANK).wait()


def receive(group, spec: Sequence[Sequence], device: torch.device | str = "cpu",
            limit: int = BUCKET_BYTES) -> Iterable[tuple[str, torch.Tensor]]:
    """Receive the tensors `spec` names (the server's side), yielding (name, tensor) in order."""
    for idx in buckets(spec, limit):
        sizes = [_nbytes(spec[i][1], spec[i][2]) for i in idx]
        flat = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
        group.broadcast(flat, CLIENT_RANK).wait()
        for i, part in zip(idx, flat.split(sizes)):
            name, dtype, shape = spec[i]
            yield name, part.view(_dtype(dtype)).reshape(shape)


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
    """The tensor's raw bytes as a flat uint8 view (a contiguous copy first where needed)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)
