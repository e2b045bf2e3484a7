"""mmrlvr's rollout throughput against a bare `model.generate` loop on the same prompts.

    python benchmarks/speed/rollout.py [--repeats 5] [--prompts 16] [--group 8] [--max-new 32] [--task cell_tally]

Both sample G completions for the same prompts with the same settings; runs alternate A B A B
after a warm-up. Tokens counted are completion tokens up to and including the end-of-turn token.
`--task cell_tally` samples the chain-of-thought task from its own warm start (73-128-token
answers, built once like vs_trl.py's), so the cost per generated token is measured on long rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

TASKS = {"counting": ("configs/quickstart.yaml", "."), "cell_tally": ("configs/cell_tally_tiny.yaml", "warm_cell_tally")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--task", default="counting", choices=tuple(TASKS))
    ap.add_argument("--work", default="runs/bench_vs_trl")
    ap.add_argument("--out", default="benchmarks/results/rollout.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from benchmarks.common import table, warm_start_dir

    from mmrlvr.config import RolloutConfig
    from mmrlvr.data.collate import model_kwargs, prompt_texts
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.tasks import load_task

    config, sub = TASKS[args.task]
    work = Path(args.work) if sub == "." else Path(args.work) / sub  # the same warm starts as vs_trl.py
    model, processor = load_policy(str(warm_start_dir(work, config=config)))
    torch.set_num_threads(args.threads)
    model.eval()
    engine = HFRolloutEngine(model, processor)
    sampling = RolloutConfig(group_size=args.group, max_new_tokens=args.max_new)
    batches = [load_task(args.task, "train", args.prompts * (args.repeats + 1), 0)[i * args.prompts:(i + 1) * args.prompts]
               for i in range(args.repeats + 1)]

    def mmrlvr_run(samples, seed):
        out = engine.rollout(samples, args.group, sampling, seed)
        return int(out.completion_mask.sum())

    @torch.no_grad()
    def bare_run(samples, seed):
        processor.tokenizer.padding_side = "left"
        inputs = processor(text=prompt_texts(processor, samples), images=[s.images[0] for s in samples],
                           padding=True, return_tensors="pt")
        torch.manual_seed(seed)
        seqs = model.generate(**model_kwargs(dict(inputs)), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              max_new_tokens=args.max_new, num_return_sequences=args.group,
                              suppress_tokens=engine.suppress_ids, eos_token_id=engine.stop_ids, pad_token_id=engine.pad_id)
        new = seqs[:, inputs["input_ids"].shape[1]:]
        stop = torch.zeros_like(new, dtype=torch.bool)
        for s in engine.stop_ids:
            stop |= new == s
        after = (stop.cumsum(1) - stop.long()) > 0  # tokens after the first stop token
        return int((~after).sum())

    results = {"mmrlvr": [], "bare": []}
    mmrlvr_run(batches[0], 0), bare_run(batches[0], 0)  # warm-up
    for i, samples in enumerate(batches[1:]):
        for name, fn in (("mmrlvr", mmrlvr_run), ("bare", bare_run)):
            t0 = time.perf_counter()
            tokens = fn(samples, i)
            results[name].append(tokens / (time.perf_counter() - t0))
    rows = [{"engine": k, "tokens_per_s": statistics.median(v), "runs": len(v)} for k, v in results.items()]
    ratio = rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"]
    rows.append({"engine": "mmrlvr / bare", "tokens_per_s": ratio, "runs": args.repeats})
    print(table(rows, [("engine", "engine", ""), ("tokens_per_s", "tokens/s (median)", ".2f"), ("runs", "runs", "d")]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args), "results": results, "ratio": ratio}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
