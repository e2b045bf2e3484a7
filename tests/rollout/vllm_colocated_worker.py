"""One rank of the colocated vLLM check (run by test_vllm_colocated.py under torchrun, gloo, CPU).

Each rank owns a vLLM engine (`external_launcher`), samples its own prompt before and after a
weight sync, and writes (rank, max |sampler - learner| log-prob per sync, completions, an
all-reduce made after the engine started) to OUT/rank{r}.json.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from PIL import Image


def main(tiny_dir: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    from mmrlvr.config import RolloutConfig
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.vllm import VLLMRolloutEngine
    from mmrlvr.train.logprobs import completion_logprobs
    from mmrlvr.types import Sample

    model, proc = load_policy(tiny_dir)
    engine = VLLMRolloutEngine(tiny_dir, proc, model.config, dtype="float32", max_model_len=1024, enforce_eager=True)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)  # the learner's collectives still work beside the engine: 1 + 2 = 3
    msgs = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"rank {rank}"}]},)
    samples = [Sample("a", msgs, 0, images=(Image.new("RGB", (112, 112), (200, 80 * rank, 30)),))]
    changed = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)  # the same update on every rank, as after a DDP step
        for p in changed.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    errors, completions = [], []
    for m in (model, changed):
        engine.sync_weights(m)
        o = engine.rollout(samples, 3, RolloutConfig(max_new_tokens=8, temperature=0.8), seed=1, return_logprobs=True)
        lp, _ = completion_logprobs(m, repeat_prompts(o.prompt_inputs, 3), o.completion_ids, o.completion_mask,
                                    temperature=0.8, suppress_ids=engine.suppress_ids, with_entropy=False)
        mask = o.completion_mask.bool()
        errors.append((o.sampler_logprobs[mask] - lp.detach()[mask]).abs().max().item())
        completions.append([c.token_ids for c in o.completions])
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"rank": rank, "world": dist.get_world_size(), "all_reduce": t.item(), "errors": errors,
         "completions": completions, "in_process": engine._vllm_model() is not None}))
    dist.barrier()  # vLLM tears down its own groups at exit; the default group is left to it


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
