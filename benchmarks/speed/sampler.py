"""The token draw: transformers' `torch.multinomial` against mmrlvr's inverse CDF (`rollout.sampler`).

    python benchmarks/speed/sampler.py [--repeats 6] [--shapes cot_G8_tok128_px112,vocab151k_P2_G8_tok32_px112,...]

Draw alone: one (rows, vocabulary) softmax drawn from by each, medians of 30 calls. Rollout:
`HFRolloutEngine.rollout` of one batch with `rollout.sampler` multinomial and inverse_cdf, same
prompts and seeds, alternating, on vs_trl.py's shapes and warm starts (built once under --work).
The two draws sample other tokens, so completions differ in length: the fair figure is the time
per decoding step (rollout seconds / the longest completion), besides the plain time. Medians
after one warm-up repeat; one torch thread.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.speed.shape_ab import rollout_ab, run_shapes, shape_ab_args  # noqa: E402

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


def sampler_ab(name: str, warm: Path, repeats: int) -> dict:
    r = rollout_ab(name, warm, repeats, "sampler", SAMPLERS, "runs/bench_sampler")
    ms = r["ms_per_decode_step"]
    return {**r, "speedup_per_decode_step": ms["multinomial"] / ms["inverse_cdf"]}


def main() -> int:
    args, names = shape_ab_args(DEFAULT, "benchmarks/results/sampler.json")
    draws = [draw_alone(r, v) for r, v in DRAW_SHAPES]
    print("| rows x vocabulary | torch.multinomial ms | inverse CDF ms | speed-up |\n|---|---|---|---|")
    for d in draws:
        print(f"| {d['rows']} x {d['vocab']} | {d['ms']['multinomial']:.3f} | {d['ms']['inverse_cdf']:.3f} | {d['speedup']:.1f}x |")
    print()
    rollouts = run_shapes(
        args, names, "| shape | rows | multinomial s | inverse CDF s | multinomial ms/decoding step | inverse CDF ms/step "
                     "| speed-up per step |", sampler_ab,
        lambda name, r: (f"| {name} | {r['rows']} | {r['rollout_s']['multinomial']:.3f} | {r['rollout_s']['inverse_cdf']:.3f} "
                         f"| {r['ms_per_decode_step']['multinomial']:.2f} | {r['ms_per_decode_step']['inverse_cdf']:.2f} "
                         f"| {r['speedup_per_decode_step']:.2f}x |"))
    Path(args.out).write_text(json.dumps({"settings": vars(args), "draws": draws, "rollouts": rollouts}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
