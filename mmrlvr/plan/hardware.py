"""The hardware a config is written for, read from its header comment.

A shipped GPU config states it on one line near the top, which `mmrlvr plan` parses:

    # Hardware: one 80 GB GPU (A100/H100), bf16 ...
    # Hardware: 4 x 80 GB GPUs, fsdp2 ...

a count (a number or one/two/four/eight), the memory of each GPU in GB, and optionally the
launcher: ddp, fsdp2, zero2 or zero3 (the `configs/accelerate/` files; default: one process on one
GPU, ddp on several). `--gpus`, `--gpu-memory` and `--launcher` override what the header says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LAUNCHERS = ("one", "ddp", "fsdp2", "zero2", "zero3")
_WORDS = {"one": 1, "two": 2, "four": 4, "eight": 8}
_LINE = re.compile(r"^#\s*Hardware:\s*(?P<n>one|two|four|eight|\d+)\s*(?:x\s*)?(?P<gb>\d+(?:\.\d+)?)\s*GB\s+GPUs?\b"
                   r"(?P<rest>.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Hardware:
    gpus: int
    gpu_gb: float  # memory of each GPU, in GB (10^9 bytes, as the cards are sold)
    launcher: str  # one of LAUNCHERS


def header_hardware(path: str | Path) -> Hardware | None:
    """The `# Hardware:` line of a config file's leading comments, or None."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        m = _LINE.match(line.strip())
        if m:
            n = _WORDS.get(m["n"].lower()) or int(m["n"])
            found = re.search(r"\b(ddp|fsdp2|zero2|zero3)\b", m["rest"], re.IGNORECASE)
            launcher = found.group(1).lower() if found else ("one" if n == 1 else "ddp")
            return Hardware(n, float(m["gb"]), launcher)
    return None


def resolve_hardware(path: str | Path | None, gpus: int | None, gpu_gb: float | None,
                     launcher: str | None) -> Hardware:
    """The header's hardware with the command line's overrides; a one-line error when neither says."""
    head = header_hardware(path) if path else None
    if launcher is not None and launcher not in LAUNCHERS:
        raise ValueError(f"--launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    if gpus is not None and gpus < 1:
        raise ValueError(f"--gpus {gpus}: expected an integer >= 1")
    if gpu_gb is not None and not gpu_gb > 0:
        raise ValueError(f"--gpu-memory {gpu_gb}: expected GB > 0")
    n = gpus or (head.gpus if head else None)
    gb = gpu_gb or (head.gpu_gb if head else None)
    if n is None or gb is None:
        raise ValueError(f"{path or 'config'}: no '# Hardware: one 80 GB GPU' line in its header; "
                         "pass --gpus N --gpu-memory GB")
    if launcher is None:
        launcher = head.launcher if head and (gpus is None or gpus == head.gpus) else ("one" if n == 1 else "ddp")
        if launcher == "one" and n > 1:
            launcher = "ddp"
    if launcher == "one" and n > 1:
        raise ValueError(f"--launcher one with --gpus {n}: one process uses one GPU; pick ddp, fsdp2, zero2 or zero3")
    return Hardware(n, gb, launcher)
