"""Would `torch.compile` make decoding faster on this CPU? transformers' own compiled path
(a static KV cache and the model's forward compiled by inductor, `generate`'s `compile_config`)
against the eager forward with the dynamic cache and with the static cache, on the
chain-of-thought warm start: 64 rows, every row forced to N new tokens (`min_new_tokens`), one
thread. Each arm its own process; the first `generate` of a process (compilation, warm-up) is
reported apart from the median of the rest.

    python benchmarks/speed/compile_decode.py --tokens 120 --repeats 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ARMS = ("eager_dynamic", "eager_static", "compiled_static")


def child(arm: str, warm: str, tokens: int, repeats: int, rows: int) -> dict:
    import torch

    torch.set_num_threads(1)
    from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig
    from transformers.generation.configuration_utils import CompileConfig

    model = AutoModelForImageTextToText.from_pretrained(warm).eval()
    tok = AutoProcessor.from_pretrained(warm).tokenizer
    inputs = tok(["Count the red cells of the board row by row, then give the total."] * rows, return_tensors="pt")
    kw = dict(do_sample=True, max_new_tokens=tokens, min_new_tokens=tokens, temperature=1.0, top_k=0, top_p=1.0,
              pad_token_id=tok.pad_token_id or 0)
    if arm != "eager_dynamic":
        kw["cache_implementation"] = "static"
    if arm == "eager_static":
        kw["disable_compile"] = True
    gen_config = GenerationConfig(**kw)
    if arm == "compiled_static":
        gen_config.compile_config = CompileConfig(fullgraph=False, dynamic=False)
        gen_config.compile_config._compile_all_devices = True  # transformers compiles on CUDA only by default
    seconds = []
    for _ in range(repeats):
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**inputs, generation_config=gen_config)
        seconds.append(time.perf_counter() - t0)
    assert out.shape[1] == inputs["input_ids"].shape[1] + tokens
    return {"arm": arm, "rows": rows, "tokens": tokens, "first_s": round(seconds[0], 2),
            "ms_per_step": round(1000 * statistics.median(seconds[1:]) / tokens, 2),
            "spread_ms": [round(1000 * min(seconds[1:]) / tokens, 2), round(1000 * max(seconds[1:]) / tokens, 2)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=4, help="generate calls per process (the first reported apart)")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--work", default="runs/bench_vs_trl", help="vs_trl.py's work folder (its warm starts)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--warm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 2:
        parser.error("--repeats: at least 2 (the first call is reported apart)")
    if args.child:
        print(json.dumps(child(args.child, args.warm, args.tokens, args.repeats, args.rows)))
        return
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script
    from benchmarks.common import table
    from benchmarks.speed.vs_trl import warm_for

    warm = warm_for(Path(args.work), "warm_cell_tally")
    rows = []
    for arm in ARMS:
        cmd = [sys.executable, __file__, "--child", arm, "--warm", str(warm), "--tokens", str(args.tokens),
               "--repeats", str(args.repeats), "--rows", str(args.rows)]
        out = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                             check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows, [("arm", "arm", ""), ("rows", "rows", "d"), ("tokens", "new tokens", "d"),
                       ("first_s", "first generate s", ".2f"), ("ms_per_step", "ms / decoding step", ".2f"),
                       ("spread_ms", "spread", "")]))
    (Path(__file__).resolve().parents[1] / "results" / "compile_decode.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
