"""What `train.recompute_mlp` saves: one RL update with the gated MLPs' activation and product
recomputed in the backward, against autograd keeping all four intermediate-size tensors; with
`--setting mask_once`, what `train.mask_once` saves (one additive attention mask per forward
against SDPA's copy per layer); with `--setting recompute_norm`, what `train.recompute_norm` saves
(RMSNorms keeping only their bf16 input; bf16 weights, the default dtype of that setting). The
other settings stay at their defaults (on) in both arms.

Each measurement is its own process (arms alternate, on/off/on/off...). The model is the
embedded tiny Qwen2.5-VL, as it is ("tiny", intermediate = 2 x hidden) and with its language
model widened to Qwen2.5-VL-3B's ratio of intermediate to hidden size ("3B-ratio": hidden 256,
intermediate 1,376, 4 layers; 3B is 2,048 / 11,008 x 36) and deepened to 7B's 28 layers ("28-layer");
the vocabulary stays at 606 entries so
that logits do not hide the MLPs. The batch is the chain-of-thought shape: P prompts x G
completions of T tokens, one update (grpo, token-mean), fp32, one thread.

Reported per arm: the bytes autograd keeps for the backward when the backward starts (counted
with `torch.autograd.graph.saved_tensors_hooks`, each live storage once: exact, no allocator noise),
the peak resident memory above the level before the update (a thread reads VmRSS every 2 ms)
and the update's seconds (medians over repeats; the two arms' weights after the update are
compared bit for bit). The peak is read twice: with glibc's mmap threshold fixed at 128 KiB
(`live`: every tensor of 128 KiB or more is its own mapping, returned when freed, so the peak is
the most memory live at once, as a GPU's caching allocator would report it), and with glibc's
defaults (`default`: freed memory is kept for reuse, so the peak also carries the allocator's
history; what a CPU run's RSS shows).

    python benchmarks/memory/mlp_memory.py --repeats 3
    python benchmarks/memory/mlp_memory.py --repeats 3 --setting mask_once   # -> results/mask_memory.json
    python benchmarks/memory/mlp_memory.py --repeats 3 --setting recompute_norm   # -> results/norm_memory.json (bf16)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

# setting -> (results file, default dtype): the norm's swap acts on bf16 / fp16 models only
SETTINGS = {"recompute_mlp": ("mlp_memory.json", "float32"), "mask_once": ("mask_memory.json", "float32"),
            "recompute_norm": ("norm_memory.json", "bfloat16")}
MODELS = {"tiny": {}, "3B-ratio": {"hidden_size": 256, "intermediate_size": 1376, "num_attention_heads": 8,
                                    "num_key_value_heads": 2},
          # the tiny model at Qwen2.5-VL-7B's depth: what grows with the number of layers
          "28-layer": {"num_hidden_layers": 28, "layer_types": ["full_attention"] * 28}}


def child(model_name: str, on: bool, prompts: int, group: int, tokens: int, setting: str = "recompute_mlp",
          dtype: str = "float32") -> dict:
    import dataclasses
    import hashlib

    import torch

    torch.set_num_threads(1)
    from accelerate import Accelerator
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.data.collate import encode_prompts, repeat_prompts
    from mmrlvr.models.tiny import build_tiny, tiny_config
    from mmrlvr.tasks import load_task
    from mmrlvr.train.learner import Learner
    from mmrlvr.recipe.step import advantages_for
    from mmrlvr.types import RolloutBatch

    work = Path(tempfile.mkdtemp(prefix="mlpmem-"))
    processor = AutoProcessor.from_pretrained(build_tiny(work / "tiny", seed=0))
    config = tiny_config(processor.tokenizer)
    for k, v in MODELS[model_name].items():
        setattr(config.text_config, k, v)
    if "hidden_size" in MODELS[model_name]:
        config.vision_config.out_hidden_size = config.text_config.hidden_size
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).to(getattr(torch, dtype)).train()
    cfg = load_config(None, ["algo.algorithm=grpo", f"rollout.prompts_per_step={prompts}",
                             f"rollout.group_size={group}", f"rollout.max_new_tokens={tokens}",
                             f"train.{setting}={str(on).lower()}"])
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, tokens))  # what the loop hands the learner
    samples = load_task("counting", "train", prompts, 0)
    n = prompts * group
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(20, len(processor.tokenizer) - 20, (n, tokens), generator=gen)
    lengths = torch.randint(tokens // 2, tokens + 1, (n,), generator=gen)  # mixed completion lengths
    mask = (torch.arange(tokens)[None] < lengths[:, None]).long()
    rewards = torch.tensor([[float((i + j) % 3 == 0) for j in range(group)] for i in range(prompts)])
    batch = RolloutBatch(samples, repeat_prompts(encode_prompts(processor, samples), group), ids, mask,
                         torch.zeros(n, dtype=torch.bool), rewards, [""] * n, [None] * n, {})
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    learner = Learner(cfg, model, optimizer, Accelerator(cpu=True), [])
    torch.set_num_threads(1)

    # what is held when the backward starts: a storage packed by a branch the forward already
    # dropped (a metric computed with grad, then discarded) is freed, and its address may be reused
    packed: list = []  # (weakref to the saved tensor, storage address, storage bytes)
    kept: dict[int, int] = {}

    def pack(t):
        packed.append((weakref.ref(t), t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()))
        return t

    real_backward = learner.accelerator.backward

    def backward(loss, **kw):  # each storage once, parameters' own (weights and their views) excluded
        kept.update({ptr: size for ref, ptr, size in packed if ref() is not None and ptr not in params})
        packed.clear()
        return real_backward(loss, **kw)

    learner.accelerator.backward = backward
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    from benchmarks.common import rss_peak

    with rss_peak() as mem, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        learner.update(batch, advantages_for(batch, cfg), seed=0)
    digest = hashlib.sha256(b"".join(p.detach().float().numpy().tobytes() for p in model.parameters())).hexdigest()
    text = config.text_config
    return {"model": model_name, "setting": setting, "on": on, setting: on, "dtype": dtype, "hidden": text.hidden_size,
            "intermediate": text.intermediate_size, "layers": text.num_hidden_layers, "rows": n, "tokens": tokens,
            "kept_bytes": sum(kept.values()), "kept_mb": round(sum(kept.values()) / 2**20, 1),
            "peak_above_baseline_mb": round(mem["above_mb"], 1), "update_s": round(mem["seconds"], 3), "weights": digest[:16]}


ALLOCATORS = {"live": {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}, "default": {}}


def run_child(model_name: str, on: bool, args, allocator: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(OMP_NUM_THREADS="1", **ALLOCATORS[allocator])
    cmd = [sys.executable, __file__, "--child", model_name, "--on", str(int(on)), "--setting", args.setting,
           "--dtype", args.dtype,
           "--prompts", str(args.prompts), "--group", str(args.group), "--tokens", str(args.tokens)]
    out = subprocess.run(cmd, env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                         check=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "allocator": allocator}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--allocator", default="both", choices=["both", *ALLOCATORS])
    parser.add_argument("--setting", default="recompute_mlp", choices=list(SETTINGS), help="the train setting A/B'd")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                        help="the model's weights (default: the setting's; bfloat16 for recompute_norm)")
    parser.add_argument("--on", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.dtype = args.dtype or SETTINGS[args.setting][1]
    if args.child:
        print(json.dumps(child(args.child, bool(args.on), args.prompts, args.group, args.tokens, args.setting,
                               args.dtype)))
        return
    allocators = list(ALLOCATORS) if args.allocator == "both" else [args.allocator]
    names = args.models.split(",")
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {unknown}; known: {', '.join(MODELS)}")
    rows = []
    for name, allocator in [(n, a) for n in names for a in allocators]:
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for _ in range(args.repeats):
            for on in (False, True):
                runs[on].append(run_child(name, on, args, allocator))
        for on in (False, True):
            r = runs[on]
            row = {**r[0], "update_s": statistics.median(x["update_s"] for x in r),
                   "peak_above_baseline_mb": statistics.median(x["peak_above_baseline_mb"] for x in r),
                   "peak_spread": f"{min(x['peak_above_baseline_mb'] for x in r):.0f}-"
                                  f"{max(x['peak_above_baseline_mb'] for x in r):.0f}",
                   "s_spread": f"{min(x['update_s'] for x in r):.2f}-{max(x['update_s'] for x in r):.2f}",
                   "same_weights": len({x['weights'] for x in runs[False] + runs[True]}) == 1}
            rows.append(row)
            print(json.dumps(row), flush=True)
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script
    from benchmarks.common import table

    print(table(rows, [("model", "model", ""), ("hidden", "H", "d"), ("intermediate", "I", "d"),
                       ("rows", "rows", "d"), ("tokens", "T", "d"), ("dtype", "dtype", ""), ("allocator", "allocator", ""),
                       ("on", args.setting, ""),
                       ("kept_mb", "kept for backward (MB)", ".1f"),
                       ("peak_above_baseline_mb", "peak RSS above baseline (MB)", ".0f"),
                       ("peak_spread", "spread", ""), ("update_s", "update s", ".3f"), ("s_spread", "spread", ""),
                       ("same_weights", "same weights", "")]))
    out = Path(__file__).resolve().parents[1] / "results" / SETTINGS[args.setting][0]
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
