"""Padding-free updates against padded ones: computed / valid tokens, update time and peak memory.

One RL update (`Learner.update`, grpo, the real code path) of a fixed rollout batch, run padded (the
defaults: prompts once per group under `train.prompt_once`, completions padded to the longest) and
packed (`train.padding_free: true`: each micro-batch's real tokens as one sequence), interleaved in
one process: every repeat runs both arms back to back, the order alternating, so a neighbour's load
on a shared machine falls on both. The optimizer's learning rate is 0, so both arms update the same
weights every time. Cases, each a batch of `--prompts` x `--group` rows:

- `cot`: the chain-of-thought task (`cell_tally`); each row's completion is the teacher's chain for
  another board (the task's own lengths: about 90 to 120 tokens);
- `video`: the video task (`video_motion`, 8 frames); completions from the length mix below (its own
  answers are 8 to 10 tokens);
- `mix`: the counting task's image prompts; completions from a long-tailed length mix: log-uniform
  between 4 and `--tokens`, one row of each group at `--tokens` (RL completions of a group spread
  from tens to hundreds of tokens).

Per arm and repeat: `train/padding_waste` (tokens the forwards computed / valid ones), the update's
wall time, its CPU time (the main thread's: with one torch thread the compute runs there, and on a
machine shared with others it is what the update itself used, while the wall time also holds the
waits for a core) and the peak resident memory above the resident memory before it (`common.rss_peak`, run
with `MALLOC_MMAP_THRESHOLD_=65536` so the resident memory follows the live tensors); once per arm,
the peak bytes of live tensors counted exactly (`plan_activations.PeakBytes`). Medians over the
repeats (after one untimed warm-up update per arm), the spread as min-max, and per repeat the
ratio padded / packed. Models: the embedded tiny Qwen2.5-VL's architecture (`--width tiny`, random
weights), or its decoder widened to real layer widths with 2 layers (`0.5B`: Qwen2.5-0.5B's layer,
hidden 896, intermediate 4,864; `3B`: Qwen2.5-VL-3B's), built in the process, nothing downloaded.
Each case runs in its own process (one torch thread).

    python benchmarks/speed/padding_free.py                                   # tiny, 3 repeats
    python benchmarks/speed/padding_free.py --width 0.5B --prompts 2 --group 8 --tokens 256
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = {  # name -> (task, task arguments, where completion lengths come from)
    "cot": ("cell_tally", {}, "own"),
    "video": ("video_motion", {"frames": 8}, "mix"),
    "mix": ("counting", {}, "mix"),
}
ARMS = ("padded", "packed")
WIDTHS = {  # decoder settings over the tiny config (2 layers for the real widths)
    "tiny": {},
    "0.5B": {"hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14, "num_key_value_heads": 2,
             "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2, "head_dim": 64},
    "3B": {"hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16, "num_key_value_heads": 2,
           "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2, "head_dim": 128},
}
METRICS = ("waste", "seconds", "cpu_seconds", "rss_mb")


def build_model(width: str, tokenizer):
    """A Qwen2.5-VL of the tiny config, its decoder at `width` (random weights, seed 0)."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from mmrlvr.models.tiny import tiny_config

    config = tiny_config(tokenizer)
    over = WIDTHS[width]
    if over:
        for k, v in over.items():
            setattr(config.text_config, k, v)
        half = over["head_dim"] // 2  # the rotary sections (time, height, width) sum to head_dim / 2
        config.text_config.rope_parameters["mrope_section"] = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
        config.vision_config.out_hidden_size = over["hidden_size"]
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).train()


def completion_lengths(kind: str, own: list[int], n: int, group: int, tokens: int, seed: int = 0) -> list[int]:
    """n completion lengths: the task's own (`own`), or the long-tailed mix (log-uniform in
    [4, tokens], the first row of each group at `tokens`)."""
    import random

    if kind == "own":
        return own[:n]
    rng = random.Random(seed)
    return [tokens if i % group == 0 else int(round(math.exp(rng.uniform(math.log(4), math.log(tokens)))))
            for i in range(n)]


def make_batch(case: str, processor, prompts: int, group: int, tokens: int):
    """The case's rollout batch: the task's prompts repeated per group, completions of the case's lengths."""
    import torch

    from mmrlvr.data.collate import encode_prompts, repeat_prompts
    from mmrlvr.tasks import load_task
    from mmrlvr.train.sft import target_ids
    from mmrlvr.types import RolloutBatch

    task, args, kind = CASES[case]
    n = prompts * group
    samples = load_task(task, "train", n if kind == "own" else prompts, 0, **args)
    own = target_ids(processor.tokenizer, samples) if kind == "own" else []
    lengths = completion_lengths(kind, [len(t) for t in own], n, group, tokens)
    width = max(lengths)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(20, len(processor.tokenizer) - 20, (n, width), generator=gen)  # no special token
    for i, t in enumerate(own[:n]):
        ids[i, :len(t)] = torch.tensor(t)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(mask == 0, processor.tokenizer.pad_token_id)
    rewards = torch.tensor([[float((i + j) % 2) for j in range(group)] for i in range(prompts)])
    inputs = repeat_prompts(encode_prompts(processor, samples[:prompts]), group)  # every group's rewards differ
    return RolloutBatch(samples[:prompts], inputs, ids, mask, torch.zeros(n, dtype=torch.bool), rewards,
                        [""] * n, [None] * n, {})


def run_case(case: str, width: str = "tiny", prompts: int = 2, group: int = 8, tokens: int = 256,
             repeats: int = 3, count_tensors: bool = True) -> dict:
    """Both arms of one case in this process, interleaved; what the table and the JSON show."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoProcessor

    from mmrlvr.checks.resolve import resolve_config
    from mmrlvr.config import load_config
    from mmrlvr.models.tiny import ensure_tiny
    from mmrlvr.train.learner import Learner
    from mmrlvr.recipe.step import advantages_for

    sys.path.append(str(ROOT))  # the repository root, for `benchmarks.` imports when run as a script
    from benchmarks.common import rss_peak
    from benchmarks.memory.plan_activations import PeakBytes

    torch.set_num_threads(1)
    processor = AutoProcessor.from_pretrained(ensure_tiny())
    model = build_model(width, processor.tokenizer)
    batch = make_batch(case, processor, prompts, group, tokens)
    base = ["algo.algorithm=grpo", f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
            f"rollout.max_new_tokens={batch.completion_ids.shape[1]}", "train.max_grad_norm=1e9"]
    learners, adv = {}, None
    for arm in ARMS:
        cfg = resolve_config(load_config(None, base + [f"train.padding_free={arm == 'packed'}"]))
        adv = advantages_for(batch, cfg)
        learners[arm] = Learner(cfg, model, torch.optim.SGD(model.parameters(), lr=0.0), Accelerator(cpu=True), [])
    runs: dict = {arm: {m: [] for m in METRICS} for arm in ARMS}
    for arm in ARMS:  # one untimed update each: first-call costs
        learners[arm].update(batch, adv, seed=0)
    for i in range(repeats):
        for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
            cpu = time.thread_time()
            with rss_peak() as mem:
                stats = learners[arm].update(batch, adv, seed=0)
            runs[arm]["cpu_seconds"].append(time.thread_time() - cpu)
            runs[arm]["waste"].append(stats["train/padding_waste"])
            runs[arm]["seconds"].append(mem["seconds"])
            runs[arm]["rss_mb"].append(mem["above_mb"])
    out = {"case": case, "task": CASES[case][0], "width": width, "rows": prompts * group, "prompts": prompts,
           "group": group, "completion_lengths": batch.completion_mask.sum(1).tolist(),
           "prompt_lengths": batch.prompt_inputs["attention_mask"].sum(1).tolist(),
           "prompt_width": int(batch.prompt_inputs["attention_mask"].shape[1]), "repeats": repeats}
    for arm in ARMS:
        r = runs[arm]
        out[arm] = {**{m: r[m] for m in METRICS}, **{f"{m}_median": statistics.median(r[m]) for m in METRICS},
                    **{f"{m}_spread": [min(r[m]), max(r[m])] for m in METRICS}}
        if count_tensors:
            with PeakBytes() as counter:
                learners[arm].update(batch, adv, seed=0)
            out[arm]["tensor_peak_mb"] = counter.peak / 2**20
    for key, metric in (("time", "seconds"), ("cpu", "cpu_seconds")):  # padded / packed: above 1, packing is faster
        ratios = [a / b for a, b in zip(runs["padded"][metric], runs["packed"][metric])]
        out[f"{key}_ratio_median"], out[f"{key}_ratio_spread"] = statistics.median(ratios), [min(ratios), max(ratios)]
    if count_tensors:
        out["memory_ratio"] = out["padded"]["tensor_peak_mb"] / out["packed"]["tensor_peak_mb"]
    return out


def run_child(case: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    cmd = [sys.executable, __file__, "--child", case, "--width", args.width, "--prompts", str(args.prompts),
           "--group", str(args.group), "--tokens", str(args.tokens), "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"case {case} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spread(x: list[float], fmt: str) -> str:
    return f"{x[0]:{fmt}}-{x[1]:{fmt}}"


def markdown(rows: list[dict]) -> str:
    """The results page's table: one line per case, both arms side by side."""
    lines = ["| case | rows | completion tokens | computed/valid padded | packed | update s padded | packed "
             "| padded/packed wall (spread) | padded/packed CPU (spread) | peak tensors MB padded | packed "
             "| peak RSS above start MB padded | packed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, k, lengths = r["padded"], r["packed"], r["completion_lengths"]
        tensors = (f"{p['tensor_peak_mb']:.0f} | {k['tensor_peak_mb']:.0f}" if "tensor_peak_mb" in p else "- | -")
        lines.append(
            f"| {r['case']} ({r['task']}) | {r['rows']} | {min(lengths)}-{max(lengths)} "
            f"| {p['waste_median']:.2f} | {k['waste_median']:.2f} "
            f"| {p['seconds_median']:.2f} ({_spread(p['seconds_spread'], '.2f')}) "
            f"| {k['seconds_median']:.2f} ({_spread(k['seconds_spread'], '.2f')}) "
            f"| {r['time_ratio_median']:.2f}x ({_spread(r['time_ratio_spread'], '.2f')}) "
            f"| {r['cpu_ratio_median']:.2f}x ({_spread(r['cpu_ratio_spread'], '.2f')}) | {tensors} "
            f"| {p['rss_mb_median']:.0f} ({_spread(p['rss_mb_spread'], '.0f')}) "
            f"| {k['rss_mb_median']:.0f} ({_spread(k['rss_mb_spread'], '.0f')}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--width", default="tiny", choices=list(WIDTHS))
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256, help="the length mix's longest completion")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inline", action="store_true", help="run the cases in this process (the tests' toy runs)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "padding_free.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_case(args.child, args.width, args.prompts, args.group, args.tokens, args.repeats)))
        return 0
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(CASES)}")
    t0 = time.perf_counter()
    rows = []
    for case in cases:
        rows.append(run_case(case, args.width, args.prompts, args.group, args.tokens, args.repeats)
                    if args.inline else run_child(case, args))
        print(json.dumps({k: v for k, v in rows[-1].items() if "lengths" not in k}), flush=True)
    table = markdown(rows)
    print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"width": args.width, "seconds": time.perf_counter() - t0, "cases": rows,
                                          "table": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
