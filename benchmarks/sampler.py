"""The token draw: transformers' `torch.multinomial` against mmrlvr's inverse CDF (`rollout.sampler`).

    python benchmarks/sampler.py [--repeats 6] [--shapes cot_G8_tok128_px112,vocab151k_P2_G8_tok32_px112,...]

Draw alone: one (rows, vocabulary) softmax drawn from by each, medians of 30 calls. Rollout:
`HFRolloutEngine.rollout` of one batch with `rollout.sampler` multinomial and inverse_cdf, same
prompts and seeds, alternating, on vs_trl.py's shapes and warm starts (built once under --work).
The two draws sample other tokens, so completions differ in length: the fair figure is the time
per decoding step (rollout seconds / the longest completion), besides the plain time. Medians
after one warm-up repeat; one torch thread.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median_after_warmup, shape_ab_args  # noqa: E402
from vs_trl import SHAPES, warm_for  # noqa: E402
from vs_trl_arms import _samples, load_bench_config, prompts  # noqa: E402

DEFAULT = "G8_tok32_px112,cot_G8_tok128_px112,vocab151k_P2_G8_tok32_px112"
DRAW_SHAPES = [(64, 606), (128, 606), (16, 151_936), (64, 151_936)]
SAMPLERS = ("multinomial", "inverse_cdf")


def draw_alone(rows: int, vocab: int, calls: int = 30) -> dict:
    from mmrlvr.rollout.sampler import draw_inverse_cdf

    probs = torch.softmax(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3, -1)
    out = {}
    for name, fn in (("multinomial", lambda: torch.multinomial(probs, 1)), ("inverse_cdf", lambda: draw_inverse_cdf(probs))):
        fn()
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1e3
    return {"rows": rows, "vocab": vocab, "ms": out, "speedup": out["multinomial"] / out["inverse_cdf"]}


def rollout_ab(name: str, warm: Path, repeats: int) -> dict:
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine

    shape = {**SHAPES[name], "name": name}
    cfg = load_bench_config(shape, warm, repeats, Path("runs/bench_sampler") / name)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    torch.set_num_threads(1)
    b, g = prompts(shape), shape["group"]
    samples = _samples(cfg, b * repeats)
    engine = HFRolloutEngine(model, processor)
    secs: dict = {s: [] for s in SAMPLERS}
    per_step: dict = {s: [] for s in SAMPLERS}
    for i in range(repeats):
        for s in SAMPLERS:
            t0 = time.perf_counter()
            out = engine.rollout(samples[i * b:(i + 1) * b], g, dataclasses.replace(cfg.rollout, sampler=s), seed=i)
            dt = time.perf_counter() - t0
            secs[s].append(dt)
            per_step[s].append(dt / max(int(out.completion_mask.sum(1).max()), 1) * 1e3)
    med = {s: median_after_warmup(secs[s]) for s in SAMPLERS}
    ms = {s: median_after_warmup(per_step[s]) for s in SAMPLERS}
    return {"rollout_s": med, "ms_per_decode_step": ms, "rows": b * g,
            "speedup_per_decode_step": ms["multinomial"] / ms["inverse_cdf"]}


def main() -> int:
    args, names = shape_ab_args(DEFAULT, "benchmarks/results/sampler.json")
    draws = [draw_alone(r, v) for r, v in DRAW_SHAPES]
    print("| rows x vocabulary | torch.multinomial ms | inverse CDF ms | speed-up |\n|---|---|---|---|")
    for d in draws:
        print(f"| {d['rows']} x {d['vocab']} | {d['ms']['multinomial']:.3f} | {d['ms']['inverse_cdf']:.3f} | {d['speedup']:.1f}x |")
    rollouts = {}
    print("\n| shape | rows | multinomial s | inverse CDF s | multinomial ms/decoding step | inverse CDF ms/step | speed-up per step |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        r = rollouts[name] = rollout_ab(name, warm_for(Path(args.work), SHAPES[name]["warm"]), args.repeats)
        print(f"| {name} | {r['rows']} | {r['rollout_s']['multinomial']:.3f} | {r['rollout_s']['inverse_cdf']:.3f} "
              f"| {r['ms_per_decode_step']['multinomial']:.2f} | {r['ms_per_decode_step']['inverse_cdf']:.2f} "
              f"| {r['speedup_per_decode_step']:.2f}x |", flush=True)
    Path(args.out).write_text(json.dumps({"settings": vars(args), "draws": draws, "rollouts": rollouts}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
