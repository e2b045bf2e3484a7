"""Prompt replay: reuse prompts of medium pass rate, regenerating on-policy rollouts for them.

Source: "prompt replay" (arXiv 2603.21177) and the authors' released sampler,
`baroian/GRPO_prompt_replay` (commit 9e406c7), file `open-instruct/open_instruct/grpo_fast.py`, class
`ShufflingIterator`: `next_for_step` (lines 841-874), `_max_replay_budget` (883-889),
`_pop_next_replay_candidate` (895-936), `_is_prompt_cooled_down` (938-944),
`_push_replay_candidate` / `_is_rate_within_replay_window` / `_make_replay_heap_entry`
(977-1018), `update_prompt_pass_entries` (1105-1126); the pass rate is
`np.mean(scores) / args.max_possible_score` (line 2688). Read there; written here from scratch.

Rules (as there):
- after each step a prompt's pass rate is its group's mean reward over `max_reward`; a prompt
  with pass rate 0 never enters the queue; one with min_pass_rate <= rate <= max_pass_rate and
  fewer than `max_reuse` replays enters (or stays in) a priority queue ordered by
  (|rate - 0.5|, rate, reuse count, dataset index): nearest 0.5 first, ties lower rate first;
- a step's batch of P prompts holds at most min(floor(P * fraction), P // 2) replays (P: the
  step's first `take`; dynamic sampling's later rounds for the same step share that budget, so the
  trained batch stays at most that share replays); a replay is taken
  only if at least `cooldown` steps passed since the prompt was last sampled, it is not already
  in this step's batch and it is not in flight (taken, no feedback yet); each replay adds one to
  its reuse count and leaves the queue until its feedback puts it back;
- the rest of the batch is fresh prompts from the seeded stream; a stream prompt already chosen
  as a replay this step is skipped (consumed, as the authors' `_next_index(exclude=...)` does).

Differences from the authors' sampler (all documented choices of ours):
- the fresh stream is `SeededStream`'s seeded shuffle (`random.Random(f"data-{seed}-{epoch}")`
  over all samples, a fresh order per pass) instead of numpy's generator, so with no replays
  this source gives exactly the prompts of today's stream; the authors also draw a random
  +-20 % "cooldown_ready_step" from the same generator (line 925), which is logged metadata
  only (the eligibility check uses the fixed cooldown): we drop it, which changes nothing else;
- one queue entry per prompt, ranked on its latest pass rate; the authors' lazy heap can hold
  a second, older entry of a prompt fed back while already queued and then serves it once at
  the older rate's priority;
- "in flight" covers every prompt taken and not yet fed back (fresh ones too); the authors mark
  only replays active (with synchronous steps this is the same);
- the last-sampled step is recorded at `take` (the authors record the training step at
  feedback: the same step when steps are synchronous);
- settings are validated (0 <= fraction, 0 <= min_pass_rate <= max_pass_rate <= 1,
  cooldown >= 0, max_reuse >= 1) instead of clamped, swapped or disabled by negative values;
- a group with no scorable reward (all NaN) ends the prompt's flight but leaves its pass rate
  and queue place as they were.
"""

from __future__ import annotations

import math
import random
from typing import Any, Sequence

import numpy as np


class PromptReplay:
    """A prompt source: `take(n, step)` prompts, `feedback(step, ids, rewards)` after scoring.

    State (`state_dict`) is plain JSON: stream position, per-prompt pass rate, reuse count,
    last-sampled step, queue, prompts in flight, and this step's choices. Not `prefetchable`:
    feedback changes what the next `take` returns, so nothing may look ahead of it.
    """

    prefetchable = False

    def __init__(self, samples: Sequence, seed: int, *, fraction: float = 0.5, cooldown: int = 5,
                 max_reuse: int = 5, min_pass_rate: float = 0.24, max_pass_rate: float = 0.7,
                 max_reward: float = 1.0):
        problems = []
        if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and fraction >= 0):
            problems.append(f"fraction={fraction!r}: expected a number >= 0 (capped at 0.5)")
        if not (isinstance(cooldown, int) and cooldown >= 0):
            problems.append(f"cooldown={cooldown!r}: expected an integer >= 0 (steps)")
        if not (isinstance(max_reuse, int) and max_reuse >= 1):
            problems.append(f"max_reuse={max_reuse!r}: expected an integer >= 1")
        if not (0 <= min_pass_rate <= max_pass_rate <= 1):
            problems.append(f"min_pass_rate={min_pass_rate!r}, max_pass_rate={max_pass_rate!r}: "
                            "expected 0 <= min_pass_rate <= max_pass_rate <= 1")
        if not (math.isfinite(max_reward) and max_reward > 0):
            problems.append(f"max_reward={max_reward!r}: expected a number > 0")
        if problems:
            raise ValueError("PromptReplay: " + "; ".join(problems))
        self.samples = list(samples)
        if not self.samples:
            raise ValueError("PromptReplay: no samples")
        self._index: dict[str, int] = {}
        for i, s in enumerate(self.samples):
            if s.id in self._index:
                raise ValueError(f"PromptReplay: sample id {s.id!r} appears twice (rows {self._index[s.id]} and {i})")
            self._index[s.id] = i
        self.seed = seed
        self.fraction, self.cooldown, self.max_reuse = min(float(fraction), 0.5), cooldown, max_reuse
        self.min_pass_rate, self.max_pass_rate, self.max_reward = min_pass_rate, max_pass_rate, max_reward
        self.pos = 0  # prompts drawn from the fresh stream
        self._epoch, self._order = -1, []
        self.pass_rate: dict[int, float] = {}
        self.reuse: dict[int, int] = {}
        self.last_step: dict[int, int] = {}
        self.queue: set[int] = set()
        self.in_flight: dict[int, int] = {}  # index -> number of takes awaiting feedback
        self._step: int | None = None
        self._chosen: set[int] = set()  # indices taken in step `_step`
        self._replayed: list[int] = []  # indices replayed in step `_step`
        self._taken = 0  # prompts taken in step `_step`
        self._step_budget = 0  # replays step `_step` may hold in all, over its rounds

    # -- the fresh stream (SeededStream's order) ---------------------------------------------
    def _next_fresh(self) -> int:
        epoch, i = divmod(self.pos, len(self.samples))
        if epoch != self._epoch:  # a fresh seeded shuffle per pass over the data
            self._epoch, self._order = epoch, list(range(len(self.samples)))
            random.Random(f"data-{self.seed}-{epoch}").shuffle(self._order)
        self.pos += 1
        return self._order[i]

    # -- the queue ---------------------------------------------------------------------------
    def _key(self, i: int) -> tuple:
        rate = self.pass_rate[i]
        return (abs(rate - 0.5), rate, self.reuse.get(i, 0), i)

    def queue_order(self) -> list[str]:
        """Sample ids in the queue, best first (for logs and tests)."""
        return [self.samples[i].id for i in sorted(self.queue, key=self._key)]

    def _eligible(self, i: int, step: int) -> bool:
        last = self.last_step.get(i)
        cooled = last is None or step - last >= self.cooldown
        return cooled and i not in self._chosen and not self.in_flight.get(i)

    def budget(self, n: int) -> int:
        """Most replays in a batch of n prompts: min(floor(n * fraction), n // 2)."""
        return max(0, min(int(math.floor(n * self.fraction)), n // 2))

    def take(self, n: int, step: int) -> list:
        """n samples for `step`: replays (best first) within the step's budget, then fresh prompts.

        Several calls for the same step (dynamic sampling's extra rounds) share the step's
        "already in this batch" set and its replay budget, `budget(n)` of its first call: a
        round that refills dropped groups must not fill the batch with replays, which survive
        the flat-group filter more often than fresh prompts (their pass rate is mixed).
        """
        if step != self._step:
            self._step, self._chosen, self._replayed, self._taken = step, set(), [], 0
            self._step_budget = self.budget(n)
        left = self._step_budget - len(self._replayed)
        picked: list[int] = []
        for i in sorted(self.queue, key=self._key):
            if len(picked) >= left:
                break
            if self._eligible(i, step):
                picked.append(i)
                self._chosen.add(i)
        for i in picked:
            self.reuse[i] = self.reuse.get(i, 0) + 1
            self.queue.discard(i)  # back in on feedback, if still eligible
        self._replayed += picked
        replayed = set(self._replayed)
        out = list(picked)
        while len(out) < n:
            i = self._next_fresh()
            if i in replayed:
                continue  # never a prompt already replayed this step
            out.append(i)
            self._chosen.add(i)
        for i in out:
            self.last_step[i] = step
            self.in_flight[i] = self.in_flight.get(i, 0) + 1
        self._taken += len(out)
        return [self.samples[i] for i in out]

    def feedback(self, step: int, sample_ids: Sequence[str], rewards: Any) -> None:
        """Rewards (n, G) of the prompts taken at `step` (NaN: unscorable): update pass rates
        and the queue; every taken prompt must be fed back once, dropped groups included."""
        r = np.asarray(rewards.detach().cpu() if hasattr(rewards, "detach") else rewards, dtype=np.float64)
        if r.ndim != 2 or r.shape[0] != len(sample_ids):
            raise ValueError(f"PromptReplay.feedback: rewards of shape {r.shape} for {len(sample_ids)} prompts; "
                             "expected (n, G)")
        for sid, row in zip(sample_ids, r):
            i = self._index.get(sid)
            if i is None:
                raise KeyError(f"PromptReplay.feedback: unknown sample id {sid!r}")
            if not self.in_flight.get(i):
                raise ValueError(f"PromptReplay.feedback: sample {sid!r} is not in flight at step {step}")
            self.in_flight[i] -= 1
            if not self.in_flight[i]:
                del self.in_flight[i]
            valid = row[~np.isnan(row)]
            if valid.size == 0:
                continue
            rate = float(valid.mean() / self.max_reward)
            self.pass_rate[i] = rate
            if rate > 0 and self.min_pass_rate <= rate <= self.max_pass_rate and self.reuse.get(i, 0) < self.max_reuse:
                self.queue.add(i)
            else:
                self.queue.discard(i)

    def metrics(self) -> dict[str, float]:
        """replay/frac: share of this step's prompts that are replays; replay/queue: queued
        prompts; replay/mean_reuse: mean reuse count of this step's replays (0 when none)."""
        n_rep = len(self._replayed)
        return {
            "replay/frac": n_rep / self._taken if self._taken else 0.0,
            "replay/queue": float(len(self.queue)),
            "replay/mean_reuse": sum(self.reuse[i] for i in self._replayed) / n_rep if n_rep else 0.0,
        }

    def __copy__(self) -> "PromptReplay":
        """An independent copy (a look-ahead `copy.copy(source).take(...)` must not change this one);
        the samples themselves are shared."""
        new = object.__new__(PromptReplay)
        new.__dict__.update(self.__dict__)
        for k in ("_order", "_replayed"):
            setattr(new, k, list(getattr(self, k)))
        for k in ("pass_rate", "reuse", "last_step", "in_flight"):
            setattr(new, k, dict(getattr(self, k)))
        new.queue, new._chosen = set(self.queue), set(self._chosen)
        return new

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """JSON-serialisable state, keyed by sample id."""
        ids = [s.id for s in self.samples]
        return {
            "seed": self.seed, "n_samples": len(ids), "pos": self.pos,
            "pass_rate": {ids[i]: v for i, v in sorted(self.pass_rate.items())},
            "reuse": {ids[i]: v for i, v in sorted(self.reuse.items())},
            "last_step": {ids[i]: v for i, v in sorted(self.last_step.items())},
            "queue": [ids[i] for i in sorted(self.queue)],
            "in_flight": {ids[i]: v for i, v in sorted(self.in_flight.items())},
            "step": self._step, "chosen": [ids[i] for i in sorted(self._chosen)],
            "replayed": [ids[i] for i in self._replayed], "taken": self._taken, "step_budget": self._step_budget,
        }

    def load_state_dict(self, d: dict) -> None:
        if d["seed"] != self.seed or d["n_samples"] != len(self.samples):
            raise ValueError(f"PromptReplay.load_state_dict: state of seed {d['seed']} over {d['n_samples']} samples, "
                             f"this source has seed {self.seed} over {len(self.samples)}")

        def idx(sid: str) -> int:
            if sid not in self._index:
                raise KeyError(f"PromptReplay.load_state_dict: sample id {sid!r} is not in this source")
            return self._index[sid]

        self.pos = int(d["pos"])
        self._epoch, self._order = -1, []
        self.pass_rate = {idx(k): float(v) for k, v in d["pass_rate"].items()}
        self.reuse = {idx(k): int(v) for k, v in d["reuse"].items()}
        self.last_step = {idx(k): int(v) for k, v in d["last_step"].items()}
        self.queue = {idx(k) for k in d["queue"]}
        self.in_flight = {idx(k): int(v) for k, v in d["in_flight"].items()}
        self._step = d["step"]
        self._chosen = {idx(k) for k in d["chosen"]}
        self._replayed = [idx(k) for k in d["replayed"]]
        self._taken = int(d["taken"])
        # a state saved before the budget was per step: the most its replays could have spent
        self._step_budget = int(d.get("step_budget", len(self._replayed)))
