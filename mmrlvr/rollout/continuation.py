"""The next policy turn of episodes still going, by each engine's own means.

The HF engine continues processor outputs (`episodes.context_inputs`: ids left padded, the
prompt's and inserted images' pixel values). The vLLM engine continues token prompts: the
learner's ids of prompt + completion so far and the raw media (the prompt's, then the inserted
images), which vLLM encodes itself with the learner's pixel limits (`EpisodeContext`,
`VLLMRolloutEngine.continue_contexts`). Either way the policy sees the tokens the learner's
forward reads, and each turn returns per row (token ids, sampler log-probs, stopped, text).
"""

from __future__ import annotations

import dataclasses

import torch

from mmrlvr.data.collate import select_rows
from mmrlvr.types import Sample


@dataclasses.dataclass(frozen=True)
class EpisodeContext:
    """One episode's whole context for a token-prompt engine."""

    sample: Sample  # the prompt (its own images/videos)
    token_ids: list  # prompt ids (media placeholders expanded, as the learner reads them) + completion so far
    images: tuple = ()  # the images the episode inserted, in order (PIL)


def prompt_ids(prompt_inputs: dict, row: int) -> list[int]:
    """Prompt `row`'s token ids without its left padding."""
    one = select_rows(prompt_inputs, [row])
    return one["input_ids"][0][one["attention_mask"][0].bool()].tolist()


def continue_turn(engine, prompt_inputs: dict, rows: list, sampling, seed: int, max_new_tokens: int,
                  greedy: bool = False) -> list[tuple]:
    """One more policy turn of each episode row (`episodes._Row`) with the engine that sampled turn 1."""
    if hasattr(engine, "continue_contexts"):
        contexts = [EpisodeContext(r.sample, prompt_ids(prompt_inputs, r.prompt_row) + list(r.ids), tuple(r.images))
                    for r in rows]
        return engine.continue_contexts(contexts, sampling, seed=seed, max_new_tokens=max_new_tokens, greedy=greedy)
    return engine.continue_rows(context_inputs(prompt_inputs, rows), sampling, seed=seed,
                                max_new_tokens=max_new_tokens, greedy=greedy)


def context_inputs(prompt_inputs: dict, rows: list) -> dict:
    """Model inputs (left padded) of prompt + completion so far for each row, media included."""
    seqs, types, pixels, grids = [], [], [], []
    for r in rows:
        one = select_rows(prompt_inputs, [r.prompt_row])
        keep = one["attention_mask"][0].bool()
        seqs.append(one["input_ids"][0][keep].tolist() + r.ids)
        base_types = one.get("mm_token_type_ids", torch.zeros_like(one["input_ids"]))[0][keep].tolist()
        types.append(base_types + r.types)
        if "pixel_values" in one:
            pixels.append(one["pixel_values"])
            grids.append(one["image_grid_thw"])
        pixels += r.pixel
        grids += r.grid
    width = max(len(s) for s in seqs)
    pad = 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    tt = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (s, ty) in enumerate(zip(seqs, types)):
        ids[i, width - len(s):] = torch.tensor(s)
        mask[i, width - len(s):] = 1
        tt[i, width - len(s):] = torch.tensor(ty)
    inputs: dict = {"input_ids": ids, "attention_mask": mask}
    if "mm_token_type_ids" in prompt_inputs:
        inputs["mm_token_type_ids"] = tt
    if pixels:
        inputs["pixel_values"] = torch.cat(pixels)
        inputs["image_grid_thw"] = torch.cat(grids)
    return inputs
