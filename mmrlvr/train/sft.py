"""Supervised warm start on a task's teacher completions.

A random-init policy never samples a rewarded answer, so RL needs a start that knows the format.
The warm start imitates the task's teacher (which may be flawed on purpose: RL then has
something to correct that supervision could not).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

import torch

from mmrlvr.data.collate import encode_prompts, pad_right, video_limits
from mmrlvr.data.literal_text import literal, special_strings
from mmrlvr.data.feed import decode_samples, log as data_log
from mmrlvr.models.adapters import adapter_for
from mmrlvr.models.patches.options import ForwardOptions
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.types import Sample


def target_ids(tokenizer, samples: Sequence[Sample], end_token: str = "<|im_end|>") -> list[list[int]]:
    """Each demonstration's tokens, its text literal (a target that spells a special token teaches the
    spelling, not the token), then the real end-of-turn token."""
    specials = special_strings(tokenizer)
    return [tokenizer(literal(s.target, specials) + end_token, add_special_tokens=False)["input_ids"] for s in samples]


SFT_FORWARD = ForwardOptions(chunked_head=True, recompute_mlp=True, mask_once=True, recompute_norm=True)
"""The warm start's default: every memory patch on (`train.*`'s defaults); no prompt sharing (one
row per prompt)."""


def sft_loss(model, processor, batch: Sequence[Sample], options: ForwardOptions = SFT_FORWARD,
             **option_flags: bool) -> torch.Tensor:
    """Mean negative log-likelihood of the teacher completions' tokens; `options`: how the forward
    saves memory (`ForwardOptions.of(cfg.train)`; the numbers do not depend on them), single
    options as keywords override it (`chunked_head=False`)."""
    inputs = encode_prompts(processor, batch)
    end = adapter_for(getattr(processor, "model_type", None)).turn_end  # the family's end of turn
    ids, mask = pad_right(target_ids(processor.tokenizer, batch, end), processor.tokenizer.pad_token_id)
    forward = dataclasses.replace(options, **{**option_flags, "prompt_once": False})  # one row per prompt: nothing to share
    logp, _ = completion_logprobs(model, inputs, ids, mask, options=forward)
    mask = mask.to(logp.device).float()
    return -(logp * mask).sum() / mask.sum()


def warm_start(model, processor, samples: Sequence[Sample], steps: int, lr: float, batch_size: int,
               seed: int, progress=None, options: ForwardOptions = SFT_FORWARD,
               dtype: torch.dtype | None = None) -> list[float]:
    """Train on teacher completions for `steps` steps; returns the loss curve. `dtype` (bf16): the
    forwards run in it and AdamW steps float32 masters of the trainable weights (the model's own
    float32 parameters, which hold the masters again when it returns: `precision.MasterWeights`)."""
    from mmrlvr.train.precision import MasterWeights

    missing = [s.id for s in samples if s.target is None]
    if missing:
        raise ValueError(f"warm start needs teacher targets; sample {missing[0]!r} has none")
    masters = MasterWeights(model, dtype or torch.float32)
    params = masters.params() if len(masters) else [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    rng = random.Random(f"warm-start-{seed}")
    model.train()
    losses = []
    for step in range(steps):
        batch, bad = decode_samples(rng.sample(list(samples), min(batch_size, len(samples))), video_limits(processor))
        for s, reason in bad:  # a corrupt image is dropped from the batch, not fatal
            data_log.warning("bad media in sample %s, dropped from the warm-start batch: %s", s.id, reason)
        if not batch:
            continue
        loss = sft_loss(model, processor, batch, options)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        masters.take_grads()  # bf16 gradients -> the float32 masters (nothing without masters)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        masters.put_weights()
        sched.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, losses[-1])
    # the last batch's gradients would otherwise ride into the first RL optimizer step (and make a
    # run restarted from the saved warm start differ from one that never stopped)
    model.zero_grad(set_to_none=True)
    masters.release()  # saved and handed to RL as float32 masters
    return losses
