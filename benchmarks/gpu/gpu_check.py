"""A first check on a real GPU, nothing downloaded: Qwen2.5-VL-3B's architecture with random weights.

    python benchmarks/gpu/gpu_check.py                      # one H100/H200: under 8 minutes
    python benchmarks/gpu/gpu_check.py --cpu --tiny         # the same path on CPU with the tiny model (seconds)

The model is built from the config this package ships (mmrlvr/models/configs/Qwen2.5-VL-3B-Instruct.json)
with random weights in the config's `model.dtype` (bf16; the optimizer's float32 master weights and
moments are whatever the training setup makes of it), the special-token ids set to the embedded tiny
tokenizer's (the only tokenizer available offline; sizes unchanged: the vocabulary stays 151,936).
The run is `configs/geometry_qwen2_5_vl_3b.yaml`'s shapes (group 8, completions up to 1,024 tokens,
images at the 1,280-visual-token limit, its micro_batch_tokens and generate_max_rows) with fewer prompts
(`--prompts`, default 16), on synthetic noise images; a random model rarely samples the stop token, so
completions run to the limit (the plan's worst case). Rewards are random 0/1 per completion (no verifier
runs: math-verify is not needed). Three RL steps through the project's own learner and HF engine
(`mmrlvr.recipe.loop._learner_and_engine`, `Learner.update`), then one greedy evaluation batch.

Reported (JSON, `--out`): per phase the peak `torch.cuda.max_memory_allocated` (reset before each) next
to `mmrlvr plan`'s figure for the same config and GPU; generated tokens/s; update tokens/s (prompt +
completion tokens of the rows trained per second); MFU of the update (6 x trained-forward parameters x
tokens / seconds / the GPU's dense bf16 peak: H100 / H200 989 TFLOPS, A100 312; `--peak-tflops` for
others; attention FLOPs and checkpointing's recompute not counted); and whether every tensor the
optimizer steps moved between the first and the last step. Then the last step's batch is updated
twice more, padded (the run's settings) and packed (`train.padding_free: true`), one after the other:
`padded_update_s` / `packed_update_s`, `padded_update_tokens_per_s` / `packed_update_tokens_per_s` (the
same prompt + completion tokens per second), `padded_update_peak_gb` / `packed_update_peak_gb` (null on
CPU), `padded_padding_waste` / `packed_padding_waste` (`train/padding_waste`: computed / valid tokens)
and `packed_speedup` (padded seconds / packed seconds); or `packed_refused` (why, in one line) where the
model's family or attention does not pack, `packed_error` (the exception in one line) where the packed
update failed (the rest of the report stands).

Needs on the GPU machine: torch, transformers, accelerate, peft, pillow, pyyaml, tokenizers, jinja2,
numpy (no vLLM, no network). Not needed: math-verify, qwen-vl-utils, decord, opencv, datasets,
tensorboard (none is imported on this path; tests/plan/test_gpu_check.py runs `--cpu --tiny` with them
blocked). Carry this checkout (well under 64 MiB) and run it from its root with nothing of the project
installed, exactly as the GPU machine does:

    PYTHONPATH=$PWD python benchmarks/gpu/gpu_check.py --out benchmarks/results/gpu_check.json

(`mmrlvr.tasks` is the checkout's `tasks/` folder then: `mmrlvr/__init__.py` finds it beside the package.)
After the JSON it prints a one-screen summary: per phase measured vs planned GB, tokens/s, MFU, all moved.
tests/plan/test_gpu_check.py runs `--cpu --tiny` the same way: a bare copy of the checkout, `python -S`
so that no installed mmrlvr can be imported, and the 3B build on the meta device.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "geometry_qwen2_5_vl_3b.yaml"
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "L40S": 362.0}


def _overrides(args, work: Path) -> list[str]:
    common = [f"output_dir={work}", "verifier_workers=0", "train.log_with=[]", f"seed={args.seed}"]
    if args.tiny:
        return [*common, "model.path=tiny", "model.dtype=float32", "model.attn_implementation=sdpa",
                "model.max_pixels=50176", "model.min_pixels=3136", f"rollout.prompts_per_step={args.prompts}",
                "rollout.group_size=2", "rollout.max_new_tokens=8", "eval.batch_size=2", "eval.max_new_tokens=8",
                "train.micro_batch_tokens=256", "rollout.generate_max_rows=2", "device=cpu" if args.cpu else "device=cuda"]
    return [*common, f"rollout.prompts_per_step={args.prompts}", f"eval.batch_size={args.prompts}",
            "device=cpu" if args.cpu else "device=cuda"]


def qwen3b_config(tok, attn: str = "sdpa"):
    """Qwen2.5-VL-3B's shipped config with `tok`'s special-token ids (sizes unchanged); (config, ids)."""
    from transformers import AutoConfig

    from mmrlvr.plan.shape import SHIPPED

    raw = json.loads((SHIPPED / "Qwen2.5-VL-3B-Instruct.json").read_text())
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"),
        ("vision_token_id", "<|vision_pad|>"), ("bos_token_id", "<|endoftext|>"), ("eos_token_id", "<|im_end|>"))}
    raw.update(ids, pad_token_id=tok.pad_token_id)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    config._attn_implementation = attn
    return config, ids


def _processor_and_model(cfg, tiny: bool, device: str | None = None):
    """The tiny processor (its pixel limits from the config) and the model: the tiny one, or Qwen2.5-VL-3B's
    architecture with random weights and the tiny tokenizer's special ids, built on `device` (default: the
    config's; the test builds it on `meta`, so the 3B path is exercised without a GPU)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from mmrlvr.models.load import _DTYPES, resolve_model_path
    from mmrlvr.models.tiny import ensure_tiny

    size = {"shortest_edge": cfg.model.min_pixels, "longest_edge": cfg.model.max_pixels}
    processor = AutoProcessor.from_pretrained(ensure_tiny(), size=size)
    processor.tokenizer.padding_side = "left"
    dtype = _DTYPES[cfg.model.dtype]
    if tiny:
        model = AutoModelForImageTextToText.from_pretrained(resolve_model_path("tiny"), dtype=dtype)
    else:
        config, ids = qwen3b_config(processor.tokenizer, cfg.model.attn_implementation)
        device = device or ("cpu" if cfg.device == "cpu" else "cuda")
        with torch.device(device):
            model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
        model.generation_config.eos_token_id = ids["eos_token_id"]
        model.generation_config.pad_token_id = processor.tokenizer.pad_token_id
    processor.model_type = model.config.model_type
    processor.video_limits = {"max_frames": cfg.model.video_max_frames, "total_pixels": cfg.model.video_total_pixels}
    # a random 151,936-entry model samples ids the tiny tokenizer does not have: texts are not needed
    tok_decode = processor.tokenizer.batch_decode
    n_tok = len(processor.tokenizer)
    processor.tokenizer.batch_decode = lambda seqs, **kw: tok_decode([[t for t in s if t < n_tok] for s in seqs], **kw)
    if cfg.model.freeze_vision:
        from mmrlvr.models.adapters import vision_tower

        vision_tower(model).requires_grad_(False)
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return processor, model.train()


def _samples(n: int, pixels: int, seed: int):
    """n prompts, each one noise image at about `pixels` pixels (the visual-token limit) and a question."""
    import numpy as np
    from PIL import Image

    from mmrlvr.types import Sample

    side = int(math.sqrt(pixels)) // 28 * 28
    rng = np.random.default_rng(seed)
    messages = ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text":
                 "Find the angle ABC in degrees. Think step by step, then give <answer>N</answer>."}]},)
    return [Sample(id=f"gpu-check-{i}", messages=messages, reference="45", verifier="exact",
                   images=(Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)),))
            for i in range(n)]


class Phase:
    """Wall time and peak allocated GPU memory of a block (the peak counter reset at entry)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.t0
        self.peak_gb = torch.cuda.max_memory_allocated() / 1e9 if self.cuda else None
        return False


def _batch(out, samples, group: int, gen):
    from mmrlvr.data.collate import repeat_prompts
    from mmrlvr.types import RolloutBatch

    comps = out.completions
    rewards = torch.randint(0, 2, (len(samples), group), generator=gen).float()
    return RolloutBatch(list(samples), repeat_prompts(out.prompt_inputs, group), out.completion_ids,
                        out.completion_mask, torch.tensor([c.truncated for c in comps]), rewards,
                        [c.text for c in comps], [None] * len(comps), {}, out.sampler_logprobs)


def _peak_tflops(args) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops
    if not torch.cuda.is_available() or args.cpu:
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def packed_against_padded(cfg, learner, accelerator, batch, adv, cuda: bool, tokens: int) -> dict:
    """The last step's batch updated once padded (the run's own settings) and once packed
    (`train.padding_free`), one after the other: each update's seconds, tokens/s (the same `tokens`,
    the rows' prompt + completion tokens), peak GB and `train/padding_waste`; `packed_refused`
    instead where the model cannot pack (its family or attention)."""
    import dataclasses

    from mmrlvr.models.packing import model_why_not_packed
    from mmrlvr.train.learner import Learner

    why = model_why_not_packed(learner.model)
    if why:
        return {"packed_refused": why}
    out = {}
    for arm, on in (("padded", False), ("packed", True)):
        arm_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, padding_free=on))
        arm_learner = Learner(arm_cfg, learner.model, learner.optimizer, accelerator, learner.suppress_ids,
                              ref_model=learner.ref_model, masters=learner.masters)
        with Phase(cuda) as ph:
            stats = arm_learner.update(batch, adv, seed=0)
        out.update({f"{arm}_update_s": round(ph.seconds, 2), f"{arm}_update_tokens_per_s": round(tokens / ph.seconds, 1),
                    f"{arm}_update_peak_gb": round(ph.peak_gb, 2) if cuda else None,
                    f"{arm}_padding_waste": round(stats["train/padding_waste"], 3)})
    out["packed_speedup"] = round(out["padded_update_s"] / out["packed_update_s"], 3)
    return out


def run(args) -> dict:
    from accelerate import Accelerator

    from mmrlvr.checks.resolve import resolve_config
    from mmrlvr.config import load_config
    from mmrlvr.plan.command import plan_config
    from mmrlvr.recipe.loop import _learner_and_engine
    from mmrlvr.recipe.step import advantages_for
    from mmrlvr.checks.validate import validate_config

    cuda = not args.cpu
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device; run with --cpu --tiny for the CPU smoke mode")
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    overrides = _overrides(args, work)
    cfg = resolve_config(validate_config(load_config(args.config, overrides)))
    torch.manual_seed(args.seed)
    t_build = time.perf_counter()
    processor, model = _processor_and_model(cfg, args.tiny)
    accelerator = Accelerator(cpu=args.cpu)
    learner, engine = _learner_and_engine(cfg, accelerator, model, processor, False, work)
    build_s = time.perf_counter() - t_build
    samples = _samples(cfg.rollout.prompts_per_step, cfg.model.max_pixels, args.seed)
    g = cfg.rollout.group_size
    trained = [p for group in learner.optimizer.param_groups for p in group["params"]]
    before = [p.detach().float().cpu().clone() for p in trained]
    gen = torch.Generator().manual_seed(args.seed)
    steps, peaks = [], {"rollout": 0.0, "reference": 0.0, "update": 0.0, "evaluation": 0.0}
    text_tokens = None
    for step in range(1, args.steps + 1):
        with Phase(cuda) as ph_roll:
            out = engine.rollout(samples, g, cfg.rollout, seed=args.seed * 1000 + step)
        batch = _batch(out, samples, g, gen)
        adv = advantages_for(batch, cfg)
        if learner.algo.kl_coef > 0:
            with Phase(cuda) as ph_ref:
                learner.reference_logprobs(batch)
            peaks["reference"] = max(peaks["reference"], ph_ref.peak_gb or 0.0)
        with Phase(cuda) as ph_up:
            stats = learner.update(batch, adv, seed=step)
        ids = out.prompt_inputs["input_ids"]
        prompt_tokens = int(out.prompt_inputs["attention_mask"].sum())
        image_id = model.config.image_token_id
        text_tokens = int(((ids != image_id) & out.prompt_inputs["attention_mask"].bool()).sum(1).max())
        generated = int(out.completion_mask.sum())
        trained_tokens = prompt_tokens * g + generated
        peaks["rollout"] = max(peaks["rollout"], ph_roll.peak_gb or 0.0)
        peaks["update"] = max(peaks["update"], ph_up.peak_gb or 0.0)
        steps.append({"step": step, "rollout_s": round(ph_roll.seconds, 2), "update_s": round(ph_up.seconds, 2),
                      "generated_tokens": generated, "generated_tokens_per_s": round(generated / ph_roll.seconds, 1),
                      "update_tokens": trained_tokens, "update_tokens_per_s": round(trained_tokens / ph_up.seconds, 1),
                      "loss": stats.get("loss/policy"), "grad_norm": stats.get("actor/grad_norm")})
        print(json.dumps(steps[-1]), flush=True)
    try:  # the rest of the check is reported whatever the packed comparison does
        packed = packed_against_padded(cfg, learner, accelerator, batch, adv, cuda, trained_tokens)
    except Exception as exc:  # noqa: BLE001 - one line in the report, not a lost GPU session
        packed = {"packed_error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    with Phase(cuda) as ph_eval:
        engine.rollout(samples[:cfg.eval.batch_size], 1, cfg.rollout, seed=0, greedy=True,
                       max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens)
    peaks["evaluation"] = ph_eval.peak_gb or 0.0
    moved = [bool((p.detach().float().cpu() != b).any()) for p, b in zip(trained, before)]
    n_params = sum(p.numel() for p in trained)
    flops = 6 * n_params  # per trained token: forward + backward of the trained parameters
    peak = _peak_tflops(args)
    last = steps[-1]
    mfu = (flops * last["update_tokens"] / last["update_s"] / (peak * 1e12)) if peak else None
    gpu_gb = torch.cuda.get_device_properties(0).total_memory / 1e9 if cuda else 80.0
    planned, _ = plan_config(str(args.config), overrides, gpus=1, gpu_gb=gpu_gb, launcher="one",
                             prompt_text=text_tokens or 0)
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
        "model": "tiny" if args.tiny else "Qwen2.5-VL-3B architecture, random weights",
        "dtype": cfg.model.dtype, "prompts": cfg.rollout.prompts_per_step, "group_size": g,
        "max_new_tokens": cfg.rollout.max_new_tokens, "micro_batch_tokens": cfg.train.micro_batch_tokens,
        "generate_max_rows": cfg.rollout.generate_max_rows, "build_s": round(build_s, 1), "steps": steps,
        "phases": {name: {"measured_gb": round(peaks[name], 2) if cuda else None,
                          "planned_gb": planned["phases"].get(name, {}).get("gb")} for name in peaks},
        "plan_per_gpu_gb": planned["per_gpu_gb"], "plan_fits": planned["fits"],
        "generated_tokens_per_s": last["generated_tokens_per_s"], "update_tokens_per_s": last["update_tokens_per_s"],
        "mfu": round(mfu, 4) if mfu is not None else None, "peak_tflops": peak, **packed,
        "trained_tensors": len(trained), "trained_params": n_params, "moved_tensors": sum(moved),
        "all_moved": all(moved),
    }


def summary(result: dict) -> str:
    """One screen for a person reading the GPU machine's output: per phase measured vs planned GB, the
    last step's throughput, MFU and whether every trained tensor moved."""
    gb = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lines = [f"gpu_check: {result['model']} on {result['device']} (torch {result['torch']}, {result['dtype']}), "
             f"{result['prompts']} prompts x {result['group_size']}, up to {result['max_new_tokens']} new tokens",
             f"{'phase':<12}{'measured GB':>13}{'planned GB':>12}"]
    lines += [f"{name:<12}{gb(p['measured_gb']):>13}{gb(p['planned_gb']):>12}" for name, p in result["phases"].items()]
    mfu = result["mfu"]
    lines += [f"plan per GPU: {gb(result['plan_per_gpu_gb'])} GB, fits: {result['plan_fits']}",
              f"generated tokens/s: {result['generated_tokens_per_s']}   update tokens/s: {result['update_tokens_per_s']}"
              f"   MFU: {'-' if mfu is None else f'{100 * mfu:.1f}%'}",
              f"all moved: {result['all_moved']} ({result['moved_tensors']} of {result['trained_tensors']} trained tensors)"]
    if "packed_refused" in result or "packed_error" in result:
        why = result.get("packed_refused") or result["packed_error"]
        lines.insert(-1, f"packed update: {'refused' if 'packed_refused' in result else 'failed'} ({why})")
    elif "packed_update_tokens_per_s" in result:
        lines.insert(-1, f"update tokens/s padded: {result['padded_update_tokens_per_s']}   packed: "
                         f"{result['packed_update_tokens_per_s']} ({result['packed_speedup']:.2f}x; computed/valid "
                         f"{result['padded_padding_waste']:.2f} -> {result['packed_padding_waste']:.2f})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on CPU (with --tiny: the smoke mode)")
    parser.add_argument("--tiny", action="store_true", help="the embedded tiny model and tiny shapes")
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--prompts", type=int, default=None, help="prompts per step (default 16; tiny 2)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, for MFU")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_check.json"))
    args = parser.parse_args(argv)
    if args.cpu and not args.tiny:
        parser.error("--cpu runs the tiny model only (--cpu --tiny): the 3B architecture needs a GPU")
    args.prompts = args.prompts or (2 if args.tiny else 16)
    torch.set_num_threads(1 if args.cpu else max(1, (os.cpu_count() or 2) // 2))
    result = run(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}, indent=1))
    print(summary(result), flush=True)
    return 0 if result["all_moved"] else 1


if __name__ == "__main__":
    sys.exit(main())
