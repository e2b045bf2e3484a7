"""The activation model of `mmrlvr plan` against measured peaks: one RL update on CPU, float32.

Two models: the embedded tiny Qwen2.5-VL as it is, and one of real width ("3B-width": two decoder
layers of Qwen2.5-VL-3B, hidden 2,048, intermediate 11,008, 16 heads, 2 KV heads, head dim 128,
random init; the tiny vision tower and vocabulary, so that the layers dominate). Three token budgets
each (one micro-batch of rows x (prompt + completion) tokens), with and without gradient
checkpointing.

How it is measured: the update (`Learner.update`, the real code path: prompt-once, chunked head,
recomputed MLPs and norms, one shared mask) runs under a `TorchDispatchMode` that sees every tensor
an operator returns and follows its storage with a weak reference, so it knows the bytes live at
every moment; the peak of that count is the measurement (exact, no allocator noise; storages that
alias an operator's inputs are views and not counted). Weights and their gradient buffers are
allocated before the count starts (the gradients as zeros, so the backward adds into them as it
does from the second micro-batch on), so the peak is what the plan calls activations: what the
forward keeps, the backward's working tensors and each layer's weight gradients as computed.

    python benchmarks/memory/plan_activations.py            # -> benchmarks/results/plan_activations.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

WIDE = {"hidden_size": 2048, "intermediate_size": 11008, "num_attention_heads": 16, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "layer_types": ["full_attention"] * 2, "head_dim": 128}
# name -> (prompts, group, completion tokens) per budget: computed tokens grow about 2x per step
CASES = {"tiny": [(2, 4, 32), (4, 4, 64), (4, 8, 128)],
         "3B-width": [(1, 2, 64), (1, 4, 96), (2, 4, 128)]}
TOLERANCE = 0.25


class PeakBytes(TorchDispatchMode):
    """Bytes of tensor storage live at once within, counted from operator outputs (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.live: dict = {}
        self.now = self.peak = 0

    def _free(self, key) -> None:
        self.now -= self.live.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            st = t.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
            if st.nbytes() and key not in self.live and key[0] not in inputs:
                self.live[key] = (weakref.ref(st, lambda _, k=key: self._free(k)), st.nbytes())
                self.now += st.nbytes()
                self.peak = max(self.peak, self.now)
        return out


def _model(name: str, processor):
    from transformers import Qwen2_5_VLForConditionalGeneration

    from mmrlvr.models.tiny import tiny_config

    config = tiny_config(processor.tokenizer)
    if name == "3B-width":
        for k, v in WIDE.items():
            setattr(config.text_config, k, v)
        config.text_config.rope_parameters["mrope_section"] = [16, 24, 24]  # sums to head_dim / 2
        config.vision_config.out_hidden_size = WIDE["hidden_size"]
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).train()


def shape_of(model, name: str):
    """The plan's `ModelShape` of a built model (what `mmrlvr.plan.shape.model_shape` reads from a config)."""
    from mmrlvr.models.adapters import adapter_for, vision_tower
    from mmrlvr.plan.shape import ModelShape, _largest_block, _largest_matrix, _lora_in_out

    text, vision = model.config.text_config, model.config.vision_config
    return ModelShape(name=name, model_type=model.config.model_type, params=sum(p.numel() for p in model.parameters()),
                      vision_params=sum(p.numel() for p in vision_tower(model).parameters()),
                      layers=text.num_hidden_layers, hidden=text.hidden_size, heads=text.num_attention_heads,
                      kv_heads=text.num_key_value_heads, head_dim=getattr(text, "head_dim", None)
                      or text.hidden_size // text.num_attention_heads, intermediate=text.intermediate_size,
                      vocab=text.vocab_size, largest_layer=_largest_block(model), largest_matrix=_largest_matrix(model),
                      lora_in_out=_lora_in_out(model, adapter_for("qwen2_5_vl").lora_target),
                      vision_depth=vision.depth, vision_hidden=vision.hidden_size,
                      vision_intermediate=vision.intermediate_size, patch=vision.patch_size,
                      merge=vision.spatial_merge_size, temporal_patch=vision.temporal_patch_size)


def measure(name: str, prompts: int, group: int, tokens: int, checkpointing: bool, packed: bool = False) -> dict:
    """One update's measured peak (bytes beyond weights and gradients) and the plan's estimate of it;
    `packed`: under `train.padding_free` (every row at its full length, so packed = the padded rows)."""
    from accelerate import Accelerator
    from transformers import AutoProcessor

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.data.collate import encode_prompts, repeat_prompts
    from mmrlvr.models.tiny import ensure_tiny
    from mmrlvr.plan.activations import Forward, update_activation_bytes
    from mmrlvr.tasks import load_task
    from mmrlvr.train.learner import Learner
    from mmrlvr.recipe.step import advantages_for
    from mmrlvr.types import RolloutBatch

    torch.set_num_threads(1)
    processor = AutoProcessor.from_pretrained(ensure_tiny())
    model = _model(name, processor)
    if checkpointing:
        model.gradient_checkpointing_enable()
    cfg = load_config(None, ["algo.algorithm=grpo", f"rollout.prompts_per_step={prompts}", f"rollout.group_size={group}",
                             f"rollout.max_new_tokens={tokens}", f"train.padding_free={packed}"])
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, tokens))
    samples = load_task("counting", "train", prompts, 0)
    n = prompts * group
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(20, len(processor.tokenizer) - 20, (n, tokens), generator=gen)
    lengths = torch.randint(tokens // 2, tokens + 1, (n,), generator=gen)
    lengths[0] = tokens  # the micro-batch is padded to its longest: one row at the full length
    if packed:
        lengths[:] = tokens  # the plan's geometry: every row at its full length (packed it pays for real tokens)
    mask = (torch.arange(tokens)[None] < lengths[:, None]).long()
    rewards = torch.tensor([[float((i + j) % 3 == 0) for j in range(group)] for i in range(prompts)])
    enc = encode_prompts(processor, samples)
    batch = RolloutBatch(samples, repeat_prompts(enc, group), ids, mask, torch.zeros(n, dtype=torch.bool),
                         rewards, [""] * n, [None] * n, {})
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # before the count: the gradients are the plan's own line, not activations
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    optimizer.zero_grad = lambda set_to_none=True: None  # keep them allocated through the update
    learner = Learner(cfg, model, optimizer, Accelerator(cpu=True), [])
    adv = advantages_for(batch, cfg)
    start = time.perf_counter()
    with PeakBytes() as counter:
        learner.update(batch, adv, seed=0)
    seconds = time.perf_counter() - start
    visual = int((enc["input_ids"][0] == model.config.image_token_id).sum())
    f = Forward(rows=n, prompts=prompts, prompt=enc["input_ids"].shape[1], completion=tokens, dtype="float32",
                checkpointing=checkpointing, visual_tokens=visual, trainable_vision=True, packed=packed)
    parts = update_activation_bytes(shape_of(model, name), f)
    planned = parts.pop("peak")
    return {"model": name, "checkpointing": checkpointing, "packed": packed, "rows": n, "prompts": prompts, "prompt_tokens": f.prompt,
            "completion_tokens": tokens, "computed_tokens": f.tokens, "measured_mb": round(counter.peak / 2**20, 2),
            "planned_mb": round(planned / 2**20, 2), "ratio": round(planned / counter.peak, 3),
            "parts_mb": {k: round(v / 2**20, 2) for k, v in parts.items()}, "update_s": round(seconds, 2)}


def run(models: list[str], checkpointing: list[bool]) -> list[dict]:
    return [measure(m, *case, gc) for m in models for gc in checkpointing for case in CASES[m]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "plan_activations.json"))
    args = parser.parse_args()
    rows = run(args.models.split(","), [False, True])
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script
    from benchmarks.common import table

    print(table(rows, [("model", "model", ""), ("checkpointing", "grad ckpt", ""), ("rows", "rows", "d"),
                       ("computed_tokens", "tokens", "d"), ("measured_mb", "measured MB", ".1f"),
                       ("planned_mb", "plan MB", ".1f"), ("ratio", "plan / measured", ".2f"),
                       ("update_s", "s", ".1f")]))
    Path(args.out).write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if abs(r["ratio"] - 1) > TOLERANCE]
    print(f"{len(rows) - len(bad)} of {len(rows)} within {TOLERANCE:.0%}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
