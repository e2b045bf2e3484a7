"""Temporal contrast in the step: answer each video prompt again on its frames shuffled.

The shuffled prompts show the same sampled frames in another order (`ShuffledVideo`: the
timeline and position ids are unchanged, only the content moves), are sampled with the same
engine and scored by the same verifiers, and are never trained on: they only decide the bonus
(`maths.py` beside this: pure functions of the ordered and shuffled scores).
"""

from __future__ import annotations

import dataclasses
import zlib

import torch

from mmrlvr.data.media import ShuffledVideo
from mmrlvr.methods.temporal_contrast.maths import temporal_bonus
from mmrlvr.train.rewards import score_completions
from mmrlvr.types import Sample


def shuffled_sample(sample: Sample, seed: int) -> Sample:
    """The same prompt with every video's frames in a seeded random order (never the identity)."""
    base = zlib.crc32(sample.id.encode()) ^ seed
    videos = tuple(ShuffledVideo(v, base + k) for k, v in enumerate(sample.videos))
    return dataclasses.replace(sample, id=f"{sample.id}#shuffled", videos=videos)


def temporal_contrast(engine, prompts, rewards: torch.Tensor, verdicts, cfg, scorer, seed: int) -> tuple[torch.Tensor, dict]:
    """(B, G) rewards plus the temporal bonus on video prompts, and the `temporal/...` metrics.

    Accuracy is the first reward term's score (the answer verifier, as in T-GRPO), so a format
    bonus never counts as being right.
    """
    tc = cfg.temporal_contrast
    # a prompt shown demonstrations is skipped: its answer leans on the demos, not on frame order
    rows = [i for i, s in enumerate(prompts) if s.videos and "demo_ids" not in s.meta]
    if not tc.enabled or not rows:
        return rewards, {}
    g = rewards.shape[1]
    k = tc.shuffled_samples or max(1, g // 2)
    shuffled = [shuffled_sample(prompts[i], seed) for i in rows]
    out = engine.rollout(shuffled, k, cfg.rollout, seed=seed)
    _, _, shuf_verdicts = score_completions(out.completions, shuffled, k, cfg.rewards, scorer)
    ordered = torch.tensor([[verdicts[i * g + j].score for j in range(g)] for i in rows], dtype=torch.float)
    shuf = torch.tensor([v.score for v in shuf_verdicts], dtype=torch.float).view(len(rows), k)
    bonus, stats = temporal_bonus(tc.method, ordered, shuf, tc.alpha, tc.mu, tc.correct_threshold)
    rewards = rewards.clone()
    rewards[rows] = rewards[rows] + bonus
    return rewards, {k2: float(v) for k2, v in stats.items()}
