"""Held-out evaluation with the reward the run trains for: greedy answers scored by every term.

The terms are `eval.verifiers` when set, else the configured `rewards:`, else each sample's own
verifier. Each term is reported under its verifier's name (and its parts as `<name>/<part>`),
`reward` is their weighted sum, and the headline metric is named for what it measures:
`accuracy` for a pass/fail answer verifier, `mean_iou` for IoU, and so on. With `samples > 1`
the report adds `mean@K` and `pass@K` over K completions sampled at the rollout temperature.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from mmrlvr.data.bad_rows import BadRows
from mmrlvr.data.prompts import example_fields
from mmrlvr.rollout.episodes import run_episodes
from mmrlvr.train.rewards import run_terms
from mmrlvr.types import Sample

try:  # media decoding errors name the file (mmrlvr.data.media, when present); PIL raises OSError
    from mmrlvr.data.media import MediaError

    BAD_MEDIA: tuple = (MediaError, OSError)
except ImportError:
    BAD_MEDIA = (OSError,)

def term_name(spec: str) -> str:
    """`count` -> count, `path/file.py:my_fn` -> my_fn (the same names as `reward/<name>`)."""
    return spec.rsplit(":", 1)[-1]


def headline_of(spec: str) -> str | None:
    """The metric a verifier's mean score is (accuracy, mean_iou, ...), as declared where it is
    registered (`register_verifier(..., headline=...)` or `fn.eval_metric`), or None if unnamed."""
    from mmrlvr.verifiers.base import resolve_verifier

    try:
        return getattr(resolve_verifier(spec), "eval_metric", None)
    except Exception:  # a broken plug-in is reported by the scorer, not here
        return None


def eval_terms(rewards: Sequence, verifiers: Sequence[str]) -> list[tuple[str, float]]:
    """(spec, weight) pairs to evaluate with; empty means each sample's own verifier."""
    if verifiers:
        return [(v, 1.0) for v in verifiers]
    return [(t.verifier, t.weight) for t in rewards]


def _score(completions: list[str], samples: list[Sample], terms, scorer) -> tuple[list[dict], list[dict]]:
    """Per completion: {spec: score} and {spec: parts}, scored as training scores (`run_terms`)."""
    scores: list[dict] = [{} for _ in samples]
    parts: list[dict] = [{} for _ in samples]
    for spec, rows in run_terms(completions, samples, terms, scorer).items():
        for i, _, v in rows:
            scores[i][spec], parts[i][spec] = v.score, v.parts
    return scores, parts


SAID = {"accuracy": "accuracy", "mean_iou": "mean IoU", "mean_tiou": "mean tIoU", "box_f1": "box F1",
        "order_score": "order score", "reward": "mean reward"}


def headline_name(terms, samples) -> str:
    """What `accuracy` in a report measures: the first term's declared headline (accuracy only
    for pass/fail verifiers, mean_iou, mean_tiou, ...), else "reward" (the weight-normalised sum)."""
    specs = [spec for spec, _ in terms] or [s.verifier for s in samples[:1]]
    for spec in specs:
        head = headline_of(spec)
        if head is not None:
            return head
    return "reward"


def said(headline: str) -> str:
    """A headline as printed: "mean IoU", "accuracy", "mean reward"."""
    return SAID.get(headline, headline.replace("_", " "))


def _headline_score(row_scores: dict, row_terms) -> float:
    """The first pass/fail-or-named term's score, else the weight-normalised reward."""
    for spec, _ in row_terms:
        if headline_of(spec) is not None:
            return row_scores[spec]
    total = sum(w for _, w in row_terms) or 1.0
    return sum(row_scores[s] * w for s, w in row_terms) / total


def summarize(samples: list[Sample], scores: list[dict], parts: list[dict], terms) -> dict:
    """Means over rows: reward, each term, each part, and the headline metric(s)."""
    sums: dict[str, list[float]] = defaultdict(list)
    for s, row_scores, row_parts in zip(samples, scores, parts):
        row_terms = terms or [(s.verifier, 1.0)]
        sums["reward"].append(sum(row_scores[spec] * w for spec, w in row_terms))
        sums["score"].append(_headline_score(row_scores, row_terms))
        seen = set()
        for spec, _ in row_terms:
            name = term_name(spec)
            sums[name].append(row_scores[spec])
            for k, x in row_parts[spec].items():
                if isinstance(x, (int, float)):
                    sums[f"{name}/{k}"].append(float(x))
            head = headline_of(spec)
            if head and head not in seen:
                seen.add(head)
                sums[head].append(row_scores[spec])
    return {k: sum(v) / len(v) for k, v in sums.items() if v}


def _rollout_rows(engine, chunk: list[Sample], rows: list[int], k: int, sampling, seed: int, greedy: bool,
                  max_new_tokens, skipped: list, bad: BadRows) -> tuple[list[Sample], list[str], int]:
    """Generate for a chunk; if its media cannot be encoded, retry row by row and skip the bad ones
    (each listed in `skipped` with its reason and counted in `bad`, which stops past the limit)."""
    try:
        out = run_episodes(engine, chunk, k, sampling, seed, greedy=greedy, max_new_tokens=max_new_tokens)
        return chunk, [c.text for c in out.completions], int(out.completion_mask.sum())
    except BAD_MEDIA:
        if len(chunk) == 1:
            raise
    kept, texts, length = [], [], 0
    for s, row in zip(chunk, rows):
        try:
            one, t, n = _rollout_rows(engine, [s], [row], k, sampling, seed, greedy, max_new_tokens, skipped, bad)
        except BAD_MEDIA as exc:  # a row whose media cannot be read is reported, skipped and counted
            skipped.append({"row": row, "reason": f"{type(exc).__name__}: {exc}"})
            bad.add(row, f"row {row}: {skipped[-1]['reason']}")
            continue
        kept += one
        texts += t
        length += n
    return kept, texts, length


def evaluate(engine, samples: Sequence[Sample], scorer, sampling, batch_size: int = 64,
             max_new_tokens: int | None = None, terms: Sequence[tuple[str, float]] = (),
             k: int = 1, seed: int = 0, max_bad_frac: float | None = None) -> dict:
    """Greedy answers for every row, scored by `terms`; with k > 1 also mean@k and pass@k.

    Rows the loader skipped and rows whose media fail to decode are listed in `skipped` with
    their reasons, and count together against one limit (`mmrlvr.data.bad_rows`: the samples'
    own, else `max_bad_frac`): past it evaluation stops with a DataError naming them.

    Returns {"n", "accuracy", "metrics": {reward, <headline>, <term>, <term>/<part>},
    "skipped": [{"row", "reason"}], "mean_length", "examples", "mean@k", "pass@k"}; `accuracy` is
    the mean headline score of the greedy answers, and `headline` says what it is (`accuracy` for
    pass/fail verifiers, `mean_iou`, `mean_tiou`, ..., `reward` for a weighted sum of scores).
    """
    terms = list(terms)
    skipped = [dict(x) for x in getattr(samples, "skipped", [])]  # rows the loader could not use
    bad = BadRows.of(samples, max_bad_frac)
    kept, texts, length = [], [], 0
    for start in range(0, len(samples), batch_size):
        chunk = list(samples[start : start + batch_size])
        rows = [s.meta.get("row", start + i) for i, s in enumerate(chunk)]
        got, t, n = _rollout_rows(engine, chunk, rows, 1, sampling, seed, True, max_new_tokens, skipped, bad)
        kept += got
        texts += t
        length += n
    scores, parts = _score(texts, kept, terms, scorer)
    metrics = summarize(kept, scores, parts, terms) if kept else {}
    result = {
        "n": len(kept), "accuracy": metrics.pop("score", 0.0), "headline": headline_name(terms, list(samples)),
        "metrics": metrics, "skipped": skipped,
        "mean_length": length / max(len(kept), 1),
        "examples": [{"id": s.id, **example_fields(s), "completion": c, "scores": sc} for s, c, sc in list(zip(kept, texts, scores))[:4]],
    }
    if k > 1 and kept:
        result.update(sample_at_k(engine, kept, scorer, sampling, batch_size, max_new_tokens, terms, k, seed))
    return result


def sample_at_k(engine, samples: list[Sample], scorer, sampling, batch_size: int, max_new_tokens,
                terms, k: int, seed: int) -> dict:
    """mean@k (mean headline score of k samples) and pass@k (best of k), averaged over rows."""
    per_row: list[list[float]] = []
    step = max(1, batch_size // k)
    for start in range(0, len(samples), step):
        chunk = samples[start : start + step]
        out = engine.rollout(chunk, k, sampling, seed=seed + 1 + start, max_new_tokens=max_new_tokens)
        repeated = [chunk[c.sample_index] for c in out.completions]
        scores, _ = _score([c.text for c in out.completions], repeated, terms, scorer)
        heads = [_headline_score(sc, terms or [(s.verifier, 1.0)]) for sc, s in zip(scores, repeated)]
        per_row += [heads[i * k : (i + 1) * k] for i in range(len(chunk))]
    mean, passed = at_k(per_row)
    return {f"mean@{k}": mean, f"pass@{k}": passed}


def at_k(per_row: list[list[float]]) -> tuple[float, float]:
    """(mean@k, pass@k): the mean score of each row's k samples, and its best, averaged over rows."""
    return (sum(sum(r) / len(r) for r in per_row) / len(per_row),
            sum(max(r) for r in per_row) / len(per_row))


def eval_metrics(task: str, result: dict) -> dict:
    """`eval/<task>/<name>` for the metrics log (reward, accuracy or mean_iou, each term and part)."""
    return {f"eval/{task}/{name}": value for name, value in result["metrics"].items()}
