"""Demonstration bootstrapping: solved examples shown as earlier chat turns, early in training.

Source: CBRL (arXiv 2603.18953): demonstrations prepended as prior user/assistant turns with a
probability that falls linearly from 0.5 to 0. The paper leaves the rest open; our completion:
- schedule p_t = p0 * max(0, 1 - t / anneal_steps) (p0 0.5, anneal_steps the run's steps);
- the draw is per prompt and seeded by (seed, step, prompt id), so the prompt's whole group of G
  completions sees the same demonstrations and a resumed run draws exactly what it would have;
- k (default 2) demonstrations from the training split, never the prompt itself, of the same
  task (same `meta["task"]`, else the same verifier), each with its images/videos and an answer
  that its verifier scores 1: the teacher target when it verifies, else `<answer>reference</answer>`;
  rows without such an answer are never shown;
- the demo'd copy keeps the prompt's id (replay and DBB statistics stay per prompt) and lists the
  demonstrations in `meta["demo_ids"]`; the loss covers only the sampled completion (the turns are
  prompt tokens), and evaluation never calls this (held-out accuracy is measured without demos).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from typing import Sequence

from mmrlvr.types import Sample


def demo_probability(step: int, p0: float = 0.5, anneal_steps: int = 100) -> float:
    """p_t = p0 * max(0, 1 - t / anneal_steps): the chance that a prompt at step t gets demos."""
    if anneal_steps < 1:
        raise ValueError(f"anneal_steps={anneal_steps!r}: expected an integer >= 1")
    return p0 * max(0.0, 1.0 - step / anneal_steps)


def _rng(seed: int, step: int, sample_id: str, what: str) -> random.Random:
    return random.Random(f"demos-{what}-{seed}-{step}-{sample_id}")


def wants_demos(seed: int, step: int, sample_id: str, p: float) -> bool:
    """The seeded per-prompt draw: True with probability p, the same for the whole group."""
    return p > 0 and _rng(seed, step, sample_id, "draw").random() < p


def task_key(sample: Sample) -> str:
    """What "same task" means: the row's `meta["task"]` when it has one, else its verifier."""
    return str(sample.meta.get("task", sample.verifier))


def _reference_text(ref) -> str:
    if isinstance(ref, (list, tuple)) and all(isinstance(x, str) for x in ref):
        return ", ".join(ref)
    return ref if isinstance(ref, str) else json.dumps(ref)


def demo_answer(sample: Sample) -> str | None:
    """An assistant answer for `sample` that its verifier scores 1, or None when there is none."""
    from mmrlvr.verifiers.base import resolve_verifier, safe_verify

    if not sample.verifier:  # a generic row scored only by the config's rewards: no verifier of its own to check with
        return None
    fn = resolve_verifier(sample.verifier)
    for text in (sample.target, f"<answer>{_reference_text(sample.reference)}</answer>"):
        if text is not None and safe_verify(fn, text, sample).score >= 1.0:
            return text
    return None


class DemoPool:
    """Solved training examples by task; answers are checked lazily, once per row."""

    def __init__(self, train_samples: Sequence[Sample]):
        self.by_task: dict[str, list[Sample]] = {}
        for s in train_samples:
            self.by_task.setdefault(task_key(s), []).append(s)
        self._answers: dict[str, str | None] = {}

    def answer(self, s: Sample) -> str | None:
        if s.id not in self._answers:
            self._answers[s.id] = demo_answer(s)
        return self._answers[s.id]

    def choose(self, sample: Sample, k: int, rng: random.Random) -> list[tuple[Sample, str]]:
        """Up to k solved examples of `sample`'s task, never `sample` itself, in drawn order."""
        pool = [s for s in self.by_task.get(task_key(sample), []) if s.id != sample.id]
        rng.shuffle(pool)
        out = []
        for s in pool:
            if len(out) == k:
                break
            text = self.answer(s)
            if text is not None:
                out.append((s, text))
        return out


def with_demos(sample: Sample, demos: Sequence[tuple[Sample, str]]) -> Sample:
    """A copy of `sample` whose messages start with each demo's user turn(s) and answer.

    Media go in chat order (each demo's, then the question's), as the processor fills the
    template's image/video slots in order.
    """
    if not demos:
        return sample
    messages: list[dict] = []
    images: list = []
    videos: list = []
    for d, text in demos:
        messages += [dict(m) for m in d.messages if m.get("role") != "system"]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        images += d.images
        videos += d.videos
    system = [m for m in sample.messages if m.get("role") == "system"]
    rest = [m for m in sample.messages if m.get("role") != "system"]
    return dataclasses.replace(
        sample, messages=tuple(system + messages + rest), images=tuple(images) + sample.images,
        videos=tuple(videos) + sample.videos, meta={**sample.meta, "demo_ids": [d.id for d, _ in demos]},
    )


class DemoStrategy:
    """The collect-time strategy `demos`: `strategy(prompts, step)` -> prompts, some with demos.

    Stateless between steps (the draw is a function of seed, step and prompt id); `metrics()`
    gives `demos/frac`, the share of the last call's prompts that got demonstrations.
    """

    def __init__(self, train_samples: Sequence[Sample], seed: int, *, p0: float = 0.5,
                 anneal_steps: int = 100, k: int = 2):
        if not (isinstance(p0, (int, float)) and math.isfinite(p0) and 0 <= p0 <= 1):
            raise ValueError(f"demos: p0={p0!r}: expected a probability in [0, 1]")
        if not (isinstance(k, int) and k >= 1):
            raise ValueError(f"demos: k={k!r}: expected an integer >= 1")
        demo_probability(0, p0, anneal_steps)  # validates anneal_steps
        self.pool, self.seed, self.p0, self.anneal_steps, self.k = DemoPool(train_samples), seed, p0, anneal_steps, k
        self._last = (0, 0)

    def __call__(self, prompts: Sequence[Sample], step: int) -> list[Sample]:
        p = demo_probability(step, self.p0, self.anneal_steps)
        out = []
        for s in prompts:
            if wants_demos(self.seed, step, s.id, p):
                s = with_demos(s, self.pool.choose(s, self.k, _rng(self.seed, step, s.id, "choose")))
            out.append(s)
        self._last = (sum("demo_ids" in s.meta for s in out), len(out))
        return out

    def metrics(self) -> dict[str, float]:
        shown, n = self._last
        return {"demos/frac": shown / n if n else 0.0}


class DemoSource:
    """A prompt source that applies `DemoStrategy` to what the wrapped source hands out, right
    after `take` and before rollout (so the demonstrations' media are decoded with the prompt's,
    and the group is sampled with them). Feedback and state go to the wrapped source: the draw
    is a function of (seed, step, prompt id), so the schedule position is the step itself."""

    def __init__(self, source, strategy: DemoStrategy):
        self.source, self.strategy = source, strategy
        self.prefetchable = getattr(source, "prefetchable", False)
        self._counts = (None, 0, 0)  # (step, prompts shown demos, prompts) over the step's takes

    @property
    def pos(self) -> int:
        return self.source.pos

    def take(self, n: int, step: int = 0) -> list[Sample]:
        out = self.strategy(self.source.take(n, step), step)
        _, shown, total = self._counts if self._counts[0] == step else (step, 0, 0)
        self._counts = (step, shown + sum("demo_ids" in s.meta for s in out), total + len(out))
        return out

    def feedback(self, step: int, sample_ids, rewards) -> None:
        self.source.feedback(step, sample_ids, rewards)

    def metrics(self) -> dict[str, float]:
        """The wrapped source's metrics and `demos/frac` over every take of the latest step
        (dynamic sampling's extra rounds included)."""
        inner = self.source.metrics() if hasattr(self.source, "metrics") else {}
        _, shown, total = self._counts
        return {**inner, "demos/frac": shown / total if total else 0.0}

    def state_dict(self) -> dict:
        return self.source.state_dict()

    def load_state_dict(self, d: dict) -> None:
        self.source.load_state_dict(d)

    def __copy__(self) -> "DemoSource":
        """A look-ahead copy: the wrapped source copied too, the strategy's metrics untouched."""
        import copy

        new = DemoSource(copy.copy(self.source), DemoStrategy.__new__(DemoStrategy))
        new.strategy.__dict__.update(self.strategy.__dict__)
        new._counts = self._counts
        return new
