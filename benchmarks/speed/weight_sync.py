"""Weight sync time against model size: the weight channel's broadcast (`mmrlvr.rollout.weight_channel`,
the code a GPU trainer runs over NCCL) from this process to a receiving process over gloo on
127.0.0.1, the way CI runs it. Models: the tiny Qwen2.5-VL, and its language model at the real
widths of Qwen2.5-VL-3B and -7B with few layers (the tiny vocabulary and vision tower), bf16.
Times the whole update (every bucket sent, received and its tensors handed on), `--repeats`
times after one warm-up; prints a markdown table and writes JSON.

    python benchmarks/speed/weight_sync.py --repeats 3 --layers 2 --out benchmarks/results/weight_sync.json

A CPU loopback measurement: what a GPU link takes is arithmetic (docs/how-to/multi-gpu.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))

# name -> text-config widths (None: the tiny model as built); heads and kv heads as the real models'
MODELS = {"tiny": None,
          "3B-width": {"hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16,
                       "num_key_value_heads": 2},
          "7B-width": {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                       "num_key_value_heads": 4}}
TIMEOUT = 600.0


def build(name: str, layers: int, work: Path):
    """(checkpoint name, bf16 tensor) pairs of the model, as `sync_pairs` hands them to the channel."""
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from mmrlvr.models.tiny import build_tiny, tiny_config
    from mmrlvr.rollout.weight_names import sync_pairs

    config = tiny_config(AutoProcessor.from_pretrained(build_tiny(work / "tiny", seed=0)).tokenizer)
    if MODELS[name] is not None:
        for key, value in {**MODELS[name], "num_hidden_layers": layers}.items():
            setattr(config.text_config, key, value)
        config.text_config.layer_types = ["full_attention"] * layers
        config.text_config.rope_parameters["mrope_section"] = [16, 24, 24]  # head_dim 128: sum = 64
        config.vision_config.out_hidden_size = config.text_config.hidden_size
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.bfloat16)
    return sync_pairs(model)


def _receiver(port: int, spec: list, rounds: int, done) -> None:
    from mmrlvr.rollout import weight_channel as wc

    store = wc.join_store("127.0.0.1", port, TIMEOUT)
    group = wc.open_group(store, wc.SERVER_RANK, "gloo", TIMEOUT)
    for _ in range(rounds):
        count = sum(1 for _ in wc.receive(group, spec))  # each bucket dropped once its tensors are handed on
        done.put(count)


def measure(name: str, layers: int, repeats: int, bucket_mb: float, work: Path) -> dict:
    """One model's sync: bytes, the seconds of each timed round (after one warm-up), GB/s."""
    from mmrlvr.rollout import weight_channel as wc

    pairs = build(name, layers, work)
    spec = wc.spec_of(pairs)
    nbytes = sum(t.numel() * t.element_size() for _, t in pairs)
    store = wc.host_store("127.0.0.1", TIMEOUT)
    wc.publish(store, 2, int(bucket_mb * 2**20))
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(store.port, spec, repeats + 1, done))
    proc.start()
    try:
        group = wc.open_group(store, wc.CLIENT_RANK, "gloo", TIMEOUT)
        times = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            wc.send(group, pairs)
            assert done.get(timeout=TIMEOUT) == len(pairs)
            times.append(time.perf_counter() - t0)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    timed = times[1:]
    params = sum(t.numel() for _, t in pairs)
    return {"model": name, "layers": layers if MODELS[name] else None, "params": params, "bytes": nbytes,
            "buckets": len(wc.buckets(spec, int(bucket_mb * 2**20))), "seconds": timed,
            "median_s": statistics.median(timed), "gb_per_s": nbytes / statistics.median(timed) / 1e9}


def row(r: dict) -> str:
    return (f"| {r['model']} | {r['layers'] or '-'} | {r['params'] / 1e6:.1f} M | {r['bytes'] / 2**20:.0f} MiB | "
            f"{r['buckets']} | {r['median_s']:.3f} | {min(r['seconds']):.3f}-{max(r['seconds']):.3f} | {r['gb_per_s']:.2f} |")


HEADER = "| model | layers | parameters | bf16 bytes | buckets | median s | range s | GB/s |"


def main(argv: list[str] | None = None) -> int:
    import tempfile

    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny,3B-width,7B-width")
    ap.add_argument("--layers", type=int, default=2, help="layers of the real-width models")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=256.0)
    ap.add_argument("--out", default="benchmarks/results/weight_sync.json")
    args = ap.parse_args(argv)
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown or args.layers < 1 or args.repeats < 1:
        raise SystemExit(f"--models: unknown {unknown} (known: {', '.join(MODELS)}); --layers and --repeats >= 1")
    torch.set_num_threads(1)
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    results = []
    with tempfile.TemporaryDirectory(prefix="weight-sync-") as work:
        for name in names:
            results.append(measure(name, args.layers, args.repeats, args.bucket_mb, Path(work)))
            print(row(results[-1]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"settings": vars(args), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
