"""Peak memory per GPU of each phase of a run, from its config and its model's sizes: `mmrlvr plan`.

Phases: `rollout` (the policy generates: its KV cache at the rollout's rows per `generate` call, or
vLLM's share under `rollout.engine=vllm`), `update` (forward + backward of one micro-batch at the
token budget, with the gradients), `reference` (no-grad forwards: KL reference, pi_old) and
`evaluation` (greedy generation of `eval.batch_size` prompts). Every phase also holds what lives
through the run: the weights in the model's dtype, float32 master weights and float32 AdamW moments
of the trainable parameters (bf16 / fp16 models: the optimizer steps the masters), the KL reference's
weights (a frozen copy; LoRA: none, the adapter is switched off) and, with vLLM and no sleep mode,
vLLM's share. The launcher shards what it shards: DDP nothing (plus its gradient buckets), ZeRO-2
gradients, masters and moments, ZeRO-3 and FSDP2 everything (plus two gathered layers).

Token geometry: a prompt is `PROMPT_TEXT_TOKENS` text tokens plus its visual tokens at the pixel
limits (`model.max_pixels`, or for video tasks the frames x `model.video_max_pixels` within
`model.video_total_pixels`); completions are `rollout.max_new_tokens` long (the worst case). GB are
10^9 bytes, as GPUs are sold; a phase fits when it stays under the GPU's memory minus `RESERVE_GB`
(CUDA context, kernels) and `FRAGMENTATION` of it (the caching allocator's slack).
"""

from __future__ import annotations

import dataclasses
import math

from mmrlvr.plan.activations import DTYPE_BYTES, Forward, kv_cache_bytes, no_grad_forward_bytes, \
    update_activation_bytes
from mmrlvr.plan.hardware import Hardware
from mmrlvr.plan.shape import ModelShape

PROMPT_TEXT_TOKENS = 256
"""Text tokens assumed per prompt (template, question, options), besides its visual tokens."""
RESERVE_GB = 1.5
"""Per GPU, outside PyTorch's tensors: CUDA context, cuBLAS / NCCL workspaces."""
FRAGMENTATION = 0.05
"""Share of the GPU the caching allocator may hold but not use."""
GB = 1e9


def task_media(name: str, args: dict | None = None) -> tuple[str, ...]:
    """The media task `name` declares (its `MEDIA`, narrowed by `args` where the task says how); an
    unknown name plans as an image task."""
    from mmrlvr.tasks import task_module
    from mmrlvr.tasks._catalogue import media

    try:
        return media(task_module(name), dict(args or {}))
    except Exception:  # noqa: BLE001 - validation names an unknown or broken task; the plan only sizes
        return ("image",)


@dataclasses.dataclass(frozen=True)
class Geometry:
    prompt: int  # tokens per prompt, visual tokens included
    visual: int  # visual tokens per prompt
    completion: int  # rollout.max_new_tokens
    eval_completion: int
    rows: int  # B x G sequences per step, all ranks
    prompts: int  # B
    rollout_rows: int  # sequences sampled per step (T-GRPO's shuffled ones included)


def visual_tokens(cfg, s: ModelShape) -> int:
    """Visual tokens per prompt at the config's pixel limits (the most a prompt can have)."""
    per = s.pixels_per_token
    tokens = []
    media = task_media(cfg.task.name, cfg.task.args)
    if "video" in media:
        frames = int(cfg.task.args.get("nframes", cfg.model.video_max_frames))
        frames = min(frames, cfg.model.video_max_frames)
        pixels = cfg.model.video_max_pixels or 768 * per
        if cfg.model.video_total_pixels:
            pixels = min(pixels, cfg.model.video_total_pixels // max(frames, 1))
        tokens.append(math.ceil(frames / s.temporal_patch) * (pixels // per))
    if "image" in media:
        pixels = cfg.model.max_pixels or s.processor_max_pixels or 16384 * per  # else the Qwen processors' own bound
        tokens.append(pixels // per)
    return max(tokens)  # a task whose rows may hold either (as configured) is planned at the larger


def geometry(cfg, s: ModelShape, prompt_text: int = PROMPT_TEXT_TOKENS) -> Geometry:
    visual = visual_tokens(cfg, s)
    b, g = cfg.rollout.prompts_per_step, cfg.rollout.group_size
    shuffled = cfg.temporal_contrast.shuffled_samples if cfg.temporal_contrast.enabled else 0
    return Geometry(prompt=visual + prompt_text, visual=visual, completion=cfg.rollout.max_new_tokens,
                    eval_completion=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                    rows=b * g, prompts=b, rollout_rows=b * (g + shuffled))


def trainable_params(cfg, s: ModelShape) -> int:
    """Parameters the optimizer steps: a LoRA adapter's, else all but a frozen vision tower."""
    if cfg.model.lora_rank > 0:
        return cfg.model.lora_rank * s.lora_in_out
    return s.params - (s.vision_params if cfg.model.freeze_vision else 0)


def _shards(launcher: str, n: int) -> dict[str, int]:
    """What each launcher divides by the GPU count."""
    full = {"weights": 1, "masters": 1, "optimizer": 1, "grads": 1}
    if launcher == "zero2":
        return {**full, "masters": n, "optimizer": n, "grads": n}
    if launcher in ("zero3", "fsdp2"):
        return {k: n for k in full}
    return full


def resident(cfg, s: ModelShape, hw: Hardware, kl: bool) -> dict[str, float]:
    """Bytes per GPU that live through every phase."""
    b = DTYPE_BYTES[cfg.model.dtype]
    trainable = trainable_params(cfg, s)
    div = _shards(hw.launcher, hw.gpus)
    out = {"weights": s.params * b / div["weights"],
           "masters": trainable * 4 / div["masters"] if b < 4 else 0.0,
           "optimizer": trainable * 8 / div["optimizer"]}
    if div["weights"] > 1:
        out["gathered_layers"] = 2 * s.largest_layer * b  # the unit in use and the one prefetched
    if kl and cfg.model.lora_rank == 0:
        out["reference_weights"] = s.params * b / div["weights"]
    if cfg.rollout.engine == "vllm" and cfg.rollout.vllm_sleep is False:
        out["vllm"] = cfg.rollout.vllm_gpu_memory_utilization * hw.gpu_gb * GB
    return out


SHARDED = ("fsdp2", "zero3")
"""Launchers whose parameters are sharded: every forward is a collective, so the learner runs neither
prompt-once nor the chunked output layer (`why_not_shared`, `why_not_chunked`)."""


def _forward(cfg, geo: Geometry, rows: int, completion: int, launcher: str = "one") -> Forward:
    g = cfg.rollout.group_size
    sharded = launcher in SHARDED
    return Forward(rows=rows, prompts=max(1, math.ceil(rows / g)), prompt=geo.prompt, completion=completion,
                   dtype=cfg.model.dtype, checkpointing=cfg.model.gradient_checkpointing,
                   prompt_once=cfg.train.prompt_once and not sharded,
                   chunked_head=cfg.train.chunked_head and not sharded,
                   recompute_mlp=cfg.train.recompute_mlp, recompute_norm=cfg.train.recompute_norm,
                   mask_once=cfg.train.mask_once, trainable_lm=cfg.model.lora_rank == 0,
                   visual_tokens=geo.visual, trainable_vision=not cfg.model.freeze_vision and cfg.model.lora_rank == 0,
                   packed=cfg.train.padding_free)


def micro_rows(cfg, geo: Geometry, algo, gpus: int, launcher: str = "one") -> int:
    """Rows of one learner micro-batch on one GPU: as many whole rows as `train.micro_batch_tokens` holds
    (the micro-batch's tokens as the forward pays for them), else rows / (mini_batches x grad_accum)."""
    per_gpu = math.ceil(geo.rows / gpus)
    budget = cfg.train.micro_batch_tokens
    if budget is None:
        return max(1, math.ceil(per_gpu / max(1, algo.mini_batches * algo.grad_accum)))
    f = _forward(cfg, geo, 2, geo.completion, launcher)
    if f.shared:  # a group's prompt once, each row its completion (+ the prompt's last token)
        per_row = geo.prompt / cfg.rollout.group_size + geo.completion + 1
    else:
        per_row = geo.prompt + geo.completion
    return max(1, min(per_gpu, int(budget // per_row)))


def update_phase(cfg, s: ModelShape, geo: Geometry, hw: Hardware, algo) -> dict[str, float]:
    b = DTYPE_BYTES[cfg.model.dtype]
    div = _shards(hw.launcher, hw.gpus)
    trainable = trainable_params(cfg, s)
    grads = trainable * (4 if b < 4 else b) / div["grads"]  # float32, beside the float32 masters
    out = {"gradients": grads}
    if hw.launcher == "ddp":
        out["ddp_buckets"] = trainable * b  # DDP's flat gradient buckets for the all-reduce
    rows = micro_rows(cfg, geo, algo, hw.gpus, hw.launcher)
    mini_rows = math.ceil(math.ceil(geo.rows / hw.gpus) / max(1, algo.mini_batches))
    if b < 4 and div["grads"] == 1 and rows < mini_rows:
        # MasterWeights (one process, DDP): from the second micro-batch on, the float32 sum on the
        # masters and this backward's bf16 gradients are both held until it ends
        out["micro_batch_gradients"] = trainable * b
    act = update_activation_bytes(s, _forward(cfg, geo, rows, geo.completion, hw.launcher))
    out["activations"] = act["peak"]
    return out


def generation(cfg, s: ModelShape, geo: Geometry, rows: int, completion: int, group: int) -> dict[str, float]:
    """One `generate` call of `rows` sequences: the KV cache at its full length, the shared prefill's
    per-prompt cache before it is repeated, the prefill forward's working set and the float32 logits."""
    dtype = cfg.model.dtype
    prompts = max(1, math.ceil(rows / group))
    prefill = Forward(rows=prompts, prompts=prompts, prompt=geo.prompt, completion=0, dtype=dtype,
                      visual_tokens=geo.visual, prompt_once=False)
    out = {"kv_cache": kv_cache_bytes(s, rows, geo.prompt + completion, dtype),
           "prefill": no_grad_forward_bytes(s, prefill) + kv_cache_bytes(s, prompts, geo.prompt, dtype),
           "logits": rows * s.vocab * 4 * 3}
    return out


def plan(cfg, s: ModelShape, hw: Hardware, prompt_text: int = PROMPT_TEXT_TOKENS) -> dict:
    """Every phase's peak per GPU (bytes, by part), whether each fits, and what to change where not."""
    from mmrlvr.checks.resolve import resolve_algo

    algo = resolve_algo(cfg.algo, cfg.rollout.max_new_tokens)
    geo = geometry(cfg, s, prompt_text)
    kl = algo.kl_coef > 0
    base = resident(cfg, s, hw, kl)
    phases: dict[str, dict[str, float]] = {}
    per_gpu_rows = math.ceil(geo.rollout_rows / hw.gpus)
    if cfg.rollout.engine == "vllm":
        phases["rollout"] = {"vllm": cfg.rollout.vllm_gpu_memory_utilization * hw.gpu_gb * GB} \
            if "vllm" not in base else {}
    elif cfg.rollout.engine == "vllm_server":  # generated on the server's GPUs (`plan.server`)
        phases["rollout"] = {}
    else:
        rows = min(per_gpu_rows, cfg.rollout.generate_max_rows or per_gpu_rows)
        phases["rollout"] = generation(cfg, s, geo, rows, geo.completion, cfg.rollout.group_size)
    phases["update"] = update_phase(cfg, s, geo, hw, algo)
    if kl or algo.ppo_epochs > 1 or algo.mini_batches > 1:
        f = _forward(cfg, geo, micro_rows(cfg, geo, algo, hw.gpus, hw.launcher), geo.completion, hw.launcher)
        phases["reference"] = {"forward": no_grad_forward_bytes(s, f)}
    eval_rows = math.ceil(cfg.eval.batch_size / hw.gpus)
    eval_rows = min(eval_rows, cfg.rollout.generate_max_rows or eval_rows)
    if cfg.rollout.engine in ("vllm", "vllm_server"):
        phases["evaluation"] = dict(phases["rollout"])
    else:
        phases["evaluation"] = generation(cfg, s, geo, eval_rows, geo.eval_completion, 1)
    usable = hw.gpu_gb * (1 - FRAGMENTATION) - RESERVE_GB
    out = {}
    for name, parts in phases.items():
        total = (sum(base.values()) + sum(parts.values())) / GB
        out[name] = {"gb": round(total, 2), "fits": total <= usable,
                     "parts_gb": {k: round(v / GB, 2) for k, v in {**base, **parts}.items()}}
    # what gradient checkpointing buys (or would): the update's activations with the other setting
    other = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, gradient_checkpointing=not cfg.model.gradient_checkpointing))
    flipped = update_phase(other, s, geo, hw, algo)["activations"]
    key = "activations_without_checkpointing_gb" if cfg.model.gradient_checkpointing else "activations_with_checkpointing_gb"
    out["update"][key] = round(flipped / GB, 2)
    peak = max(p["gb"] for p in out.values())
    return {"per_gpu_gb": peak, "fits": peak <= usable, "phases": out, "gpus": hw.gpus,
            "gpu_memory_gb": hw.gpu_gb, "usable_gb": round(usable, 2), "launcher": hw.launcher,
            "model": s.name, "params_b": round(s.params / 1e9, 3),
            "trainable_params_b": round(trainable_params(cfg, s) / 1e9, 4),
            "prompt_tokens": geo.prompt, "visual_tokens": geo.visual, "completion_tokens": geo.completion,
            "micro_batch_rows": micro_rows(cfg, geo, algo, hw.gpus, hw.launcher),
            **packed_update(cfg, geo, algo, hw)}


def packed_update(cfg, geo: Geometry, algo, hw: Hardware) -> dict:
    """`padding_free` and the tokens of the update's micro-batch forward (`update_tokens`): under
    `train.padding_free` the rows' real tokens in one sequence, planned at their full lengths."""
    f = _forward(cfg, geo, micro_rows(cfg, geo, algo, hw.gpus, hw.launcher), geo.completion, hw.launcher)
    return {"padding_free": f.packed, "update_tokens": f.tokens}


BUDGETS = (65536, 49152, 32768, 24576, 16384, 12288, 8192, 6144, 4096)
"""`train.micro_batch_tokens` values a suggestion picks from (the largest that fits)."""


def suggestions(cfg, s: ModelShape, hw: Hardware, result: dict, prompt_text: int = PROMPT_TEXT_TOKENS) -> list[str]:
    """Settings that make the phases that do not fit fit, each checked by planning again."""
    out: list[str] = []
    bad = {name for name, p in result["phases"].items() if not p["fits"]}
    g = cfg.rollout.group_size
    if bad & {"update", "reference"}:
        row = geometry(cfg, s, prompt_text)
        for budget in BUDGETS:
            if budget < row.prompt + row.completion:
                break
            trial = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, micro_batch_tokens=budget))
            p = plan(trial, s, hw, prompt_text)["phases"]
            if all(p[n]["fits"] for n in ("update", "reference") if n in p):
                out.append(f"train.micro_batch_tokens={budget}")
                break
    if bad & {"rollout", "evaluation"} and cfg.rollout.engine == "hf":
        rows = cfg.rollout.generate_max_rows or cfg.rollout.prompts_per_step * g
        while rows > g:
            rows = max(g, (rows // 2) // g * g)
            trial = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, generate_max_rows=rows))
            p = plan(trial, s, hw, prompt_text)["phases"]
            if p["rollout"]["fits"] and p["evaluation"]["fits"]:
                out.append(f"rollout.generate_max_rows={rows}")
                break
    if bad & {"rollout", "evaluation"} and cfg.rollout.engine == "vllm":
        share = cfg.rollout.vllm_gpu_memory_utilization
        while share > 0.1 + 1e-9:
            share = round(share - 0.05, 2)
            trial = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, vllm_gpu_memory_utilization=share))
            p = plan(trial, s, hw, prompt_text)["phases"]
            if p["rollout"]["fits"] and p["evaluation"]["fits"]:
                out.append(f"rollout.vllm_gpu_memory_utilization={share}")
                break
    trial = apply_overrides_to(cfg, out)
    if not plan(trial, s, hw, prompt_text)["fits"]:
        if cfg.model.lora_rank == 0:
            out.append("model.lora_rank=16 (no float32 masters, moments or gradients of the full model)")
        if not cfg.model.freeze_vision:
            out.append("model.freeze_vision=true")
        out.append(f"more GPUs with a sharding launcher: --gpus {max(2, hw.gpus * 2)} --launcher fsdp2")
    return out


def apply_overrides_to(cfg, settings: list[str]):
    """`cfg` with `section.key=number` suggestions applied."""
    for item in settings:
        key, value = item.split("=", 1)
        section, name = key.split(".")
        number = float(value) if "." in value else int(value)
        cfg = dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **{name: number})})
    return cfg


def format_plan(result: dict, notes: list[str]) -> str:
    """The human-readable table: each phase's peak per GPU and its parts."""
    lines = [f"{result['model']}: {result['params_b']:.2f} B parameters, {result['trainable_params_b']:.3f} B trained; "
             f"{result['gpus']} x {result['gpu_memory_gb']:g} GB GPU, launcher {result['launcher']} "
             f"(usable {result['usable_gb']:.1f} GB per GPU)",
             f"prompt {result['prompt_tokens']} tokens ({result['visual_tokens']} visual), completion "
             f"{result['completion_tokens']}, update micro-batch {result['micro_batch_rows']} rows per GPU", ""]
    if result.get("padding_free"):
        lines[-1:-1] = [f"update packed (train.padding_free): activations sized by the {result['update_tokens']:,} "
                        f"real tokens of its rows in one sequence (no prompt shared), with their "
                        f"{result['update_tokens']:,} x {result['update_tokens']:,} attention mask"]
    for name, p in result["phases"].items():
        parts = ", ".join(f"{k} {v:.1f}" for k, v in p["parts_gb"].items() if v >= 0.05)
        lines.append(f"{name:11s} {p['gb']:7.1f} GB  {'fits' if p['fits'] else 'DOES NOT FIT'}   ({parts})")
        for key in ("activations_without_checkpointing_gb", "activations_with_checkpointing_gb"):
            if key in p:
                lines.append(f"{'':11s} activations {key.split('_', 1)[1].removesuffix('_gb').replace('_', ' ')}: {p[key]:.1f} GB")
    lines += ["", f"peak per GPU: {result['per_gpu_gb']:.1f} GB of {result['gpu_memory_gb']:g} GB: "
                  + ("fits" if result["fits"] else "does not fit")]
    lines += [f"change: {x}" for x in result.get("suggestions", [])]
    lines += [f"note: {x}" for x in notes]
    return "\n".join(lines)
