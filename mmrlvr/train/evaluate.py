"""Held-out evaluation: greedy completions scored by each sample's verifier."""

from __future__ import annotations

from typing import Sequence

from mmrlvr.train.rewards import score_completions
from mmrlvr.types import Sample


def evaluate(engine, samples: Sequence[Sample], scorer, sampling, batch_size: int = 64,
             max_new_tokens: int | None = None) -> dict:
    """{"accuracy": mean verifier score of greedy answers, "n": count, plus mean length}."""
    total, n, length, examples = 0.0, 0, 0, []
    for start in range(0, len(samples), batch_size):
        chunk = list(samples[start : start + batch_size])
        out = engine.rollout(chunk, 1, sampling, seed=0, greedy=True, max_new_tokens=max_new_tokens)
        rewards, _, verdicts = score_completions(out.completions, chunk, 1, [], scorer)
        total += rewards.sum().item()
        n += len(chunk)
        length += int(out.completion_mask.sum())
        if not examples:
            examples = [
                {"id": s.id, "completion": c.text, "score": v.score, "reason": v.reason}
                for s, c, v in list(zip(chunk, out.completions, verdicts))[:4]
            ]
    return {"accuracy": total / max(n, 1), "n": n, "mean_length": length / max(n, 1), "examples": examples}
