"""arrol's quality head at test time (`mmrlvr eval --samples K` with sample_efficiency.arrol.eval_weighting
=head): each prompt's K sampled candidates are scored by the head from their prefix hidden state, and
two choices are reported beside mean@K and pass@K:

- head_best@K: the headline score of the candidate the head scores highest;
- head_vote@K: candidates grouped by their answer (the text of the last `<answer>...</answer>`, else
  the whole stripped text), each group weighted by the sum of its head scores; the heaviest group's
  first candidate is scored;
- vote@K: the same vote with equal weights (majority voting), the baseline the head must beat.

OUR READING: the paper says the head "can further weigh candidates to improve inference accuracy
during test-time scaling"; how the weights combine candidates is not in its text we could read.
The candidates are sampled with segmented generation keeping every row (the same completions as a
plain rollout for the seed), so the hidden state comes from the generation pass itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from mmrlvr.methods.arrol.head import QualityHead

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def load_head(checkpoint: str | Path) -> QualityHead:
    """The quality head saved in a training checkpoint's run state (checkpoints/step_N/state.json)."""
    state = Path(checkpoint) / "state.json"
    head = (json.loads(state.read_text()).get("arrol") or {}).get("head") if state.is_file() else None
    if not head or head.get("w") is None:
        raise ValueError(f"sample_efficiency.arrol.eval_weighting=head: {checkpoint} holds no trained arrol head "
                         "(give a checkpoints/step_N directory of a run with sample_efficiency.arrol.enabled)")
    out = QualityHead()
    out.load_state_dict(head)
    return out


def answer_key(text: str) -> str:
    """What votes are counted on: the last <answer>...</answer>'s content, else the stripped text."""
    found = ANSWER.findall(text)
    return (found[-1] if found else text).strip()


def weighted_choices(keys: list[str], weights: torch.Tensor) -> tuple[int, int]:
    """(index of the highest weight, first index of the answer with the largest weight sum), ties to
    the earlier candidate."""
    best = int(torch.argmax(weights))  # the first maximum
    totals: dict[str, float] = {}
    for k, w in zip(keys, weights.tolist()):
        totals[k] = totals.get(k, 0.0) + w
    top = max(totals.values())
    winner = next(k for k in totals if totals[k] == top)
    return best, keys.index(winner)


def headline_scores(texts: list[str], samples: list, terms, scorer) -> list[float]:
    """Each text's headline score, as `evaluate` scores its rows."""
    from mmrlvr.train.evaluate import _headline_score, _score

    scores, _ = _score(texts, samples, terms, scorer)
    return [_headline_score(sc, terms or [(s.verifier, 1.0)]) for sc, s in zip(scores, samples)]


def head_at_k(engine, head: QualityHead, samples: list, sampling, k: int, prefix_tokens: int, seed: int,
              max_new_tokens, terms, scorer) -> dict:
    """head_best@K and head_vote@K over `samples` (one prompt at a time), scored with `terms`."""
    best_scores, vote_scores, plain_scores = [], [], []
    for i, sample in enumerate(samples):
        hidden: list[torch.Tensor] = []

        def keep(view):
            hidden.append(view.hidden)
            return [True] * len(view.tokens)

        seg = engine.rollout_segmented([sample], k, sampling, seed + 1 + i, prefix_tokens=prefix_tokens, keep=keep,
                                       max_new_tokens=max_new_tokens)
        texts = [c.text for c in seg.output.completions]
        weights = head.score(torch.cat(hidden))
        keys = [answer_key(t) for t in texts]
        best, vote = weighted_choices(keys, weights)
        plain = weighted_choices(keys, torch.ones(len(keys)))[1]  # the unweighted majority, for comparison
        scores = headline_scores([texts[best], texts[vote], texts[plain]], [sample] * 3, terms, scorer)
        best_scores.append(scores[0])
        vote_scores.append(scores[1])
        plain_scores.append(scores[2])
    n = max(len(samples), 1)
    return {f"head_best@{k}": sum(best_scores) / n, f"head_vote@{k}": sum(vote_scores) / n,
            f"vote@{k}": sum(plain_scores) / n}
