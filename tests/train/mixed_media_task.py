"""A task for the multi-process tests (`task.name=tests.train.mixed_media_task`): image prompts and
text-only prompts (dist_worker.py's), so that a rank's share of a step can hold no media."""

from __future__ import annotations

import dataclasses


def build(split: str, size: int, seed: int, **args) -> list:
    from tests.train.dist_worker import mixed_samples

    rows = mixed_samples(video=False)  # two image prompts, two text-only prompts
    return [dataclasses.replace(rows[i % len(rows)], id=f"{split}-{i}") for i in range(size)]
