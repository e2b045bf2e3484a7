"""Rollouts with transformers `generate`: every prompt processed once, G samples each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mmrlvr.data.collate import encode_prompts, model_kwargs
from mmrlvr.types import Completion, Sample

VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>")


def vision_token_ids(tokenizer) -> list[int]:
    """Ids a policy must never sample: feeding them back breaks the image-token bookkeeping."""
    vocab = tokenizer.get_vocab()
    return sorted(vocab[t] for t in VISION_TOKENS if t in vocab)


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    ids = []
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    for e in eos if isinstance(eos, (list, tuple)) else [eos]:
        if e is not None:
            ids.append(int(e))
    for t in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.get_vocab().get(t)
        if tid is not None and tid not in ids:
            ids.append(tid)
    return ids


@dataclass
class RolloutOutput:
    completions: list[Completion]  # N = B * G, groups contiguous
    prompt_inputs: dict  # processor outputs for the B prompts (left padded)
    completion_ids: torch.Tensor  # (N, T) right padded
    completion_mask: torch.Tensor  # (N, T)


class HFRolloutEngine:
    """Samples with the policy's own `generate`; shares the policy's weights, so sync is free."""

    def __init__(self, model, processor):
        self.model = model
        self.processor = processor
        tok = processor.tokenizer
        self.suppress_ids = vision_token_ids(tok)
        self.stop_ids = stop_token_ids(tok, getattr(model, "generation_config", None))
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]

    def sync_weights(self, model) -> None:
        self.model = model

    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        return self.rollout(samples, group_size, sampling, seed).completions

    @torch.no_grad()
    def rollout(
        self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
        max_new_tokens: int | None = None,
    ) -> RolloutOutput:
        device = next(self.model.parameters()).device
        prompt_inputs = encode_prompts(self.processor, samples)
        gen_kwargs = dict(
            max_new_tokens=max_new_tokens or sampling.max_new_tokens,
            num_return_sequences=group_size,
            suppress_tokens=self.suppress_ids or None,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
        )
        if greedy:
            gen_kwargs.update(do_sample=False)
        else:
            # top_k=0 and top_p=1.0 are explicit: None would fall back to the checkpoint's
            # generation_config (often top_k=50) and sample from another distribution.
            gen_kwargs.update(
                do_sample=True, temperature=sampling.temperature,
                top_p=sampling.top_p, top_k=sampling.top_k,
            )
        torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        seqs = self.model.generate(**model_kwargs(prompt_inputs, device), **gen_kwargs)
        if was_training:
            self.model.train()
        new = seqs[:, prompt_inputs["input_ids"].shape[1]:].cpu()
        # keep each completion up to and including its first stop token (generate pads after it)
        is_stop = torch.isin(new, torch.tensor(self.stop_ids))
        finished = is_stop.any(dim=1)
        lengths = torch.where(finished, is_stop.int().argmax(dim=1) + 1, new.shape[1])
        mask = (torch.arange(new.shape[1]) < lengths[:, None]).long()
        ids = torch.where(mask.bool(), new, self.pad_id)
        token_lists = [row[:n].tolist() for row, n in zip(new, lengths.tolist())]
        texts = self.processor.tokenizer.batch_decode(token_lists, skip_special_tokens=True)
        completions = [
            Completion(i // group_size, text, toks, truncated=not done)
            for i, (text, toks, done) in enumerate(zip(texts, token_lists, finished.tolist()))
        ]
        return RolloutOutput(completions, prompt_inputs, ids, mask)
