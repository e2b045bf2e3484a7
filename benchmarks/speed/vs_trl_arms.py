"""The contenders of `vs_trl.py`, each run in its own process: mmrlvr, TRL's GRPOTrainer, a bare loop.

Every arm reads the same mmrlvr config (task, its arguments, pixel and frame limits) so the
prompts, media, verifier and reward are the same objects; only the training code differs.
Each returns per-step lists: step, generation, log-prob (no-grad forwards) and update seconds,
generated tokens, rewards and the share of groups with mixed rewards (the update only does
work on those).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

B, LR = 8, 2e-4


def load_bench_config(shape: dict, warm: Path, steps: int, out_dir: Path):
    """The mmrlvr config every arm reads: the shape's task config plus its overrides."""
    from mmrlvr.config import load_config

    over = [f"output_dir={out_dir}", "train.resume=false", f"warm_start.checkpoint={warm}",
            f"rollout.prompts_per_step={prompts(shape)}", f"rollout.group_size={shape['group']}",
            f"rollout.max_new_tokens={shape['max_new']}", f"train.lr={LR}", f"train.steps={steps}",
            "train.save_every=0", "train.eval_every=0", "algo.algorithm=grpo", "task.eval_size=8",
            "eval.batch_size=8", "verifier_workers=0", "train.log_every=1000",
            # every arm holds the same rows: the prompts its steps use (TRL's dataset is these rows)
            f"task.train_size={prompts(shape) * (steps + 2)}", *shape.get("overrides", [])]
    if shape.get("px"):
        over += [f"model.min_pixels={shape['px'] ** 2}", f"model.max_pixels={shape['px'] ** 2}"]
    return load_config(shape["config"], over)


def prompts(shape: dict) -> int:
    return shape.get("prompts", B)


def _samples(cfg, n: int):
    from mmrlvr.tasks import load_task
    from mmrlvr.train.setup import task_args

    return load_task(cfg.task.name, "train", cfg.task.train_size, cfg.seed, **task_args(cfg))[:n]


def _mixed(rewards: list[float], g: int) -> float:
    groups = [rewards[i:i + g] for i in range(0, len(rewards), g)]
    return sum(max(x) > min(x) for x in groups) / max(len(groups), 1)


# ------------------------------------------------------------------------------------------ mmrlvr
def child_mmrlvr(warm: Path, shape: dict, steps: int, out_dir: Path) -> dict:
    from mmrlvr.recipe.loop import train

    train(load_bench_config(shape, warm, steps, out_dir))
    rows = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/step" in r]
    n = prompts(shape) * shape["group"]
    return {
        "step_s": [r["time/step"] for r in rows], "gen_s": [r["time/rollout"] for r in rows],
        "logprob_s": [0.0 for _ in rows],  # one update per step: pi_old = pi, no no-grad forward
        "update_s": [r["time/update"] for r in rows], "reward": [r["reward/mean"] for r in rows],
        "mean_length": [r["rollout/mean_length"] for r in rows], "max_length": [r["rollout/max_length"] for r in rows],
        "gen_tokens": [r["rollout/mean_length"] * n for r in rows],
        "mixed": [r["rollout/mixed_group_frac"] for r in rows], "world": int(os.environ.get("WORLD_SIZE", 1)),
    }


# ------------------------------------------------------------------------------------------- floor
def child_floor(warm: Path, shape: dict, steps: int, out_dir: Path) -> dict:
    """What every arm holds before its first step, whatever the framework: torch and transformers
    imported, the shape's policy and processor loaded, one step's prompts encoded. Peak RSS above
    this is the framework's own (about 780 MB of it is imports: torch, transformers' modelling
    code, torchvision, scipy, sympy)."""
    from mmrlvr.data.collate import encode_prompts
    from mmrlvr.models.load import load_policy

    cfg = load_bench_config(shape, warm, steps, out_dir)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    encode_prompts(processor, _samples(cfg, prompts(shape)))
    return {"world": int(os.environ.get("WORLD_SIZE", 1))}


# --------------------------------------------------------------------------------------------- TRL
def _trl_prompt(sample) -> list[dict]:
    """mmrlvr's chat messages in TRL's conversational format (image placeholders stay)."""
    out = []
    for m in sample.messages:
        content = m["content"]
        if isinstance(content, list):
            content = [{"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]} for p in content]
        out.append({"role": m["role"], "content": content})
    return out


def child_trl(warm: Path, shape: dict, steps: int, out_dir: Path, checkpointing: bool | None) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import vision_token_ids
    from mmrlvr.verifiers.base import resolve_verifier, safe_verify

    torch.set_num_threads(1)
    cfg = load_bench_config(shape, warm, steps, out_dir)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    g, b = shape["group"], prompts(shape)
    samples = _samples(cfg, b * (steps + 2))
    if any(s.videos for s in samples):
        raise SystemExit("TRL 1.16's GRPOTrainer takes no video (see vs_trl.py's docstring): use the bare arm")
    ds = Dataset.from_list([{"prompt": _trl_prompt(s), "image": s.images[0], "sid": i} for i, s in enumerate(samples)])
    timing: dict = {"gen": [], "logprob": [], "step": [], "tokens": [], "mixed": []}
    acc = {"gen": 0.0, "logprob": 0.0}

    def reward(completions, sid, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = [safe_verify(resolve_verifier(samples[i].verifier), t, samples[i]).score for t, i in zip(texts, sid)]
        timing["mixed"].append(_mixed(scores, g))
        return scores

    extra = {} if checkpointing is None else {"gradient_checkpointing": checkpointing}
    args = GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=b * g, num_generations=g,
        gradient_accumulation_steps=1, max_completion_length=shape["max_new"], learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        loss_type="dapo", epsilon=0.2, epsilon_high=0.2, beta=0.0, num_iterations=1,
        mask_truncated_completions=False, temperature=1.0, top_p=1.0, top_k=0,
        generation_kwargs={"suppress_tokens": vision_token_ids(processor.tokenizer)},
        max_steps=steps, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
        bf16=False, dataloader_num_workers=0, remove_unused_columns=False, **extra,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=ds, processing_class=processor)
    torch.set_num_threads(1)

    def timed(name, fn, only_no_grad=False):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            if not (only_no_grad and torch.is_grad_enabled()):
                acc[name] += time.perf_counter() - t0
            return out
        return wrapper

    trainer._generate_single_turn = timed("gen", trainer._generate_single_turn)
    trainer._get_per_token_logps_and_entropies = timed("logprob", trainer._get_per_token_logps_and_entropies, True)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            acc.update(gen=0.0, logprob=0.0)
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            timing["step"].append(time.perf_counter() - self.t0)
            timing["gen"].append(acc["gen"])
            timing["logprob"].append(acc["logprob"])

    trainer.add_callback(StepTimer())
    trainer.train()
    hist = trainer.state.log_history
    lengths = [h["completions/mean_length"] for h in hist if "completions/mean_length" in h]
    longest = [h["completions/max_length"] for h in hist if "completions/max_length" in h]
    return {
        "step_s": timing["step"], "gen_s": timing["gen"], "logprob_s": timing["logprob"],
        "update_s": [st - gen - lp for st, gen, lp in zip(timing["step"], timing["gen"], timing["logprob"])],
        "reward": [h["reward"] for h in hist if "reward" in h], "mean_length": lengths, "max_length": longest,
        "gen_tokens": [x * b * g for x in lengths], "mixed": timing["mixed"], "world": 1,
        "gradient_checkpointing": bool(args.gradient_checkpointing),
    }


# -------------------------------------------------------------------------------------- bare loop
def child_bare(warm: Path, shape: dict, steps: int, out_dir: Path) -> dict:
    """What one writes with transformers alone: `generate` with G return sequences, rewards,
    group-normalised advantages, one teacher-forced forward/backward of the token-mean loss
    over all B*G rows (ratio 1: one update per step), AdamW. Each row re-encodes its media."""
    import torch

    from mmrlvr.data.collate import encode_prompts
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import stop_token_ids, vision_token_ids
    from mmrlvr.verifiers.base import resolve_verifier, safe_verify

    torch.set_num_threads(1)
    cfg = load_bench_config(shape, warm, steps, out_dir)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    tok = processor.tokenizer
    g, b = shape["group"], prompts(shape)
    samples = _samples(cfg, b * steps)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    pad = tok.pad_token_id
    res: dict = {k: [] for k in ("step_s", "gen_s", "logprob_s", "update_s", "reward", "mean_length", "max_length",
                                 "gen_tokens", "mixed")}
    torch.manual_seed(0)
    for step in range(steps):
        t0 = time.perf_counter()
        batch = samples[step * b:(step + 1) * b]
        inputs = {k: v for k, v in encode_prompts(processor, batch).items() if not k.startswith("_")}
        model.eval()
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=shape["max_new"], num_return_sequences=g,
                                 suppress_tokens=vision_token_ids(tok), pad_token_id=pad)
        t1 = time.perf_counter()
        plen = inputs["input_ids"].shape[1]
        comp = out[:, plen:]
        eos = torch.tensor([*stop_token_ids(tok, model.generation_config), pad])
        is_end = torch.isin(comp, eos)
        first = torch.where(is_end.any(1), is_end.int().argmax(1), comp.shape[1])
        mask = (torch.arange(comp.shape[1])[None] <= first[:, None]).long()  # the stop token is trained on
        texts = tok.batch_decode(comp.masked_fill(mask == 0, pad), skip_special_tokens=True)
        scores = [safe_verify(resolve_verifier(batch[i // g].verifier), t, batch[i // g]).score for i, t in enumerate(texts)]
        r = torch.tensor(scores).view(b, g)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
        model.train()
        rep = _repeat_media(inputs, g)
        full = torch.cat([rep["input_ids"], comp], 1)
        attn = torch.cat([rep["attention_mask"], mask], 1)
        extra = {k: v for k, v in rep.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
        if "mm_token_type_ids" in rep:
            extra["mm_token_type_ids"] = torch.cat([rep["mm_token_type_ids"], torch.zeros_like(comp)], 1)
        logits = model(input_ids=full, attention_mask=attn, **extra).logits[:, plen - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logp - logp.detach())
        loss = -(ratio * adv[:, None] * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        n_tok = int(mask.sum())
        res["step_s"].append(t2 - t0), res["gen_s"].append(t1 - t0), res["logprob_s"].append(0.0)
        res["update_s"].append(t2 - t1), res["reward"].append(float(r.mean()))
        res["mean_length"].append(n_tok / (b * g)), res["gen_tokens"].append(n_tok), res["mixed"].append(_mixed(scores, g))
        res["max_length"].append(int(mask.sum(1).max()))
    res["world"] = 1
    return res


def _repeat_media(inputs: dict, g: int) -> dict:
    """(B, ...) processor outputs -> (B*G, ...): every row its own copy, media patches included."""
    import torch

    out = {}
    for k, v in inputs.items():
        if k in ("pixel_values", "pixel_values_videos"):
            grid = inputs["image_grid_thw" if k == "pixel_values" else "video_grid_thw"]
            chunks = torch.split(v, grid.prod(-1).tolist())
            out[k] = torch.cat([c for c in chunks for _ in range(g)])
        elif isinstance(v, torch.Tensor):
            out[k] = v.repeat_interleave(g, 0)
        elif isinstance(v, list) and len(v) == len(inputs["input_ids"]):
            out[k] = [x for x in v for _ in range(g)]
        else:
            out[k] = v
    return out
