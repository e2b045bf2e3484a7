"""Score a rollout: weighted verifiers -> (B, G) reward matrix and per-verifier metrics."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from mmrlvr.types import Completion, CompletionText, Sample, Verdict
from mmrlvr.verifiers.base import check_allowed
from mmrlvr.verifiers.failures import failed_frac


def reward_terms(terms, sample: Sample) -> list[tuple[str, float]]:
    """(verifier spec, weight) pairs: the config's list (RewardTerm objects or (spec, weight)
    pairs), or the sample's own verifier.

    A sample comes from data, so its verifier must be registered: a row never chooses code.
    """
    if terms:
        return [(t.verifier, t.weight) if hasattr(t, "verifier") else (t[0], t[1]) for t in terms]
    check_allowed(sample.verifier)
    return [(sample.verifier, 1.0)]


def run_terms(texts: Sequence[str], samples: Sequence[Sample], terms, scorer) -> dict[str, list[tuple[int, float, Verdict]]]:
    """The one scoring path of training and evaluation: each term's verifier runs once over the
    rows it applies to. Returns {spec: [(row, weight, verdict), ...]} in the order terms appear."""
    by_spec: dict[str, list[tuple[int, float]]] = defaultdict(list)  # spec -> (row, weight)
    for i, s in enumerate(samples):
        for spec, w in reward_terms(terms, s):
            by_spec[spec].append((i, w))
    out = {}
    for spec, pairs in by_spec.items():
        verdicts = scorer(spec, [texts[i] for i, _ in pairs], [samples[i] for i, _ in pairs])
        out[spec] = [(i, w, v) for (i, w), v in zip(pairs, verdicts)]
    return out


def score_completions(
    completions: Sequence[Completion],
    samples: Sequence[Sample],
    group_size: int,
    terms,
    scorer,
) -> tuple[torch.Tensor, dict, list[Verdict]]:
    """Return rewards (B, G), metrics {reward/<verifier>[/<part>]: mean, verifier/failed_frac/<verifier>:
    share of that term's verdicts where the verifier failed}, and the first term's verdicts.

    `scorer(spec, completions, samples) -> list[Verdict]` runs the verifiers (in a worker pool or
    in-process); the reward is the weighted sum over terms.
    """
    b = len(samples)
    total = torch.zeros(b * group_size)
    metrics: dict = {}
    per_completion = [samples[c.sample_index] for c in completions]
    first: dict[int, Verdict] = {}
    for spec, rows in run_terms([CompletionText(c.text, c.token_ids) for c in completions], per_completion, terms, scorer).items():
        idx, verdicts = [i for i, _, _ in rows], [v for _, _, v in rows]
        scores = torch.tensor([v.score for v in verdicts])
        total[idx] += scores * torch.tensor([w for _, w, _ in rows])
        name = spec.rsplit(":", 1)[-1]
        metrics[f"reward/{name}"] = scores.mean().item()
        # every term's own failures: `verifier/failed_frac` (the step's) reads only the first term
        metrics[f"verifier/failed_frac/{name}"] = failed_frac(verdicts)
        parts: dict = defaultdict(list)
        for v in verdicts:
            for k, x in v.parts.items():
                parts[k].append(x)
        metrics.update({f"reward/{name}/{k}": sum(xs) / len(xs) for k, xs in parts.items()})
        for i, v in zip(idx, verdicts):
            first.setdefault(i, v)
    return total.view(b, group_size), metrics, [first[i] for i in range(len(completions))]
