"""Score a rollout: weighted verifiers -> (B, G) reward matrix and per-verifier metrics."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from mmrlvr.types import Completion, Sample, Verdict
from mmrlvr.verifiers.base import check_allowed


def reward_terms(terms, sample: Sample) -> list[tuple[str, float]]:
    """(verifier spec, weight) pairs: the config's list, or the sample's own verifier.

    A sample comes from data, so its verifier must be registered: a row never chooses code.
    """
    if terms:
        return [(t.verifier, t.weight) for t in terms]
    check_allowed(sample.verifier)
    return [(sample.verifier, 1.0)]


def score_completions(
    completions: Sequence[Completion],
    samples: Sequence[Sample],
    group_size: int,
    terms,
    scorer,
) -> tuple[torch.Tensor, dict, list[Verdict]]:
    """Return rewards (B, G), metrics {reward/<verifier>[/<part>]: mean}, and the first term's verdicts.

    `scorer(spec, completions, samples) -> list[Verdict]` runs the verifiers (in a worker pool or
    in-process); the reward is the weighted sum over terms.
    """
    b = len(samples)
    total = torch.zeros(b * group_size)
    metrics: dict = {}
    per_completion = [samples[c.sample_index] for c in completions]
    by_spec: dict[str, list[tuple[int, float]]] = defaultdict(list)  # spec -> (completion, weight)
    for i, s in enumerate(per_completion):
        for spec, w in reward_terms(terms, s):
            by_spec[spec].append((i, w))
    first: dict[int, Verdict] = {}
    for spec, pairs in by_spec.items():
        idx = [i for i, _ in pairs]
        verdicts = scorer(spec, [completions[i].text for i in idx], [per_completion[i] for i in idx])
        scores = torch.tensor([v.score for v in verdicts])
        total[idx] += scores * torch.tensor([w for _, w in pairs])
        name = spec.rsplit(":", 1)[-1]
        metrics[f"reward/{name}"] = scores.mean().item()
        parts: dict = defaultdict(list)
        for v in verdicts:
            for k, x in v.parts.items():
                parts[k].append(x)
        metrics.update({f"reward/{name}/{k}": sum(xs) / len(xs) for k, xs in parts.items()})
        for i, v in zip(idx, verdicts):
            first.setdefault(i, v)
    return total.view(b, group_size), metrics, [first[i] for i in range(len(completions))]
