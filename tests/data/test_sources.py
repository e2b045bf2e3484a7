"""Prompt sources, per-prompt statistics and the run state survive a JSON round trip exactly."""

import json

import torch

from mmrlvr.data.feed import MediaStream
from mmrlvr.data.sources import PromptStats, SeededStream
from mmrlvr.tasks import load_task
from mmrlvr.recipe.run_state import RunState

NAN = float("nan")


class FailedFirst:
    """A stateful toy source: a prompt whose group scored 0 everywhere comes back once, first
    (feedback changes what `take` returns); the rest come from a seeded stream."""

    prefetchable = False

    def __init__(self, samples, seed):
        self.stream, self.by_id, self.retry, self.retried = SeededStream(samples, seed), {s.id: s for s in samples}, [], []

    def take(self, n, step):
        again, self.retry = self.retry[:n], self.retry[n:]
        return [self.by_id[i] for i in again] + self.stream.take(n - len(again), step)

    def feedback(self, step, sample_ids, rewards):
        for sid, row in zip(sample_ids, rewards.tolist()):
            if max(row) == 0.0 and sid not in self.retried:
                self.retry.append(sid)
                self.retried.append(sid)

    def state_dict(self):
        return {"stream": self.stream.state_dict(), "retry": list(self.retry), "retried": list(self.retried)}

    def load_state_dict(self, d):
        self.stream.load_state_dict(d["stream"])
        self.retry, self.retried = list(d["retry"]), list(d["retried"])


def _drive(source, stats, steps, start=1):
    seen = []
    for step in range(start, start + steps):
        batch = source.take(3, step)
        ids = [s.id for s in batch]
        rewards = torch.tensor([[float(int(i[-1]) % 2), 0.0] for i in ids])  # even last digit: all-zero group
        stats.update(step, ids, rewards)
        source.feedback(step, ids, rewards)
        seen.append(ids)
    return seen


def test_stateful_source_and_stats_resume_exactly_through_json():
    samples = load_task("counting", "train", 10, 0)
    straight, s_stats = MediaStream(FailedFirst(samples, 1), prefetch=False), PromptStats()
    full = _drive(straight, s_stats, 6)
    first, f_stats = MediaStream(FailedFirst(samples, 1), prefetch=False), PromptStats()
    head = _drive(first, f_stats, 3)
    saved = json.loads(json.dumps(RunState(3, source=first.state_dict(), prompt_stats=f_stats).to_dict()))
    state = RunState.from_dict(saved)
    resumed = MediaStream(FailedFirst(samples, 1), prefetch=False)
    resumed.load_state_dict(state.source)
    tail = _drive(resumed, state.prompt_stats, 3, start=4)
    assert head + tail == full
    assert any(ids[0] in sum(full[:k], []) for k, ids in enumerate(full) if k)  # a retried prompt came back
    assert state.prompt_stats.state_dict() == s_stats.state_dict()


def test_prompt_stats_count_scored_rewards_only():
    stats = PromptStats()
    stats.update(3, ["a", "b"], torch.tensor([[1.0, 0.5, NAN], [NAN, NAN, NAN]]))
    stats.update(7, ["a"], [[0.25, 0.25, 0.0]])
    a, b = stats.get("a"), stats.get("b")
    # a: visits 2, last step 7, 5 scored rewards summing 1 + 0.5 + 0.25 + 0.25 + 0 = 2.0
    assert (a["visits"], a["last_step"], a["n"], a["reward_sum"]) == (2, 7, 5, 2.0)
    assert a["reward_sq_sum"] == 1.0 + 0.25 + 0.0625 + 0.0625
    assert stats.mean("a") == 0.4 and (b["visits"], b["n"]) == (1, 0) and stats.mean("b") is None


def test_run_state_reads_a_checkpoint_written_before_prompt_sources():
    state = RunState.from_dict({"step": 4, "data_pos": 16, "eval_before": {"accuracy": 0.5}, "warm_start": None})
    assert state.source == {"kind": "seeded_stream", "pos": 16} and state.step == 4
    stream = SeededStream(list(range(10)), seed=0)
    stream.load_state_dict(state.source)
    assert stream.take(2) == SeededStream(list(range(10)), seed=0).take(18)[16:]
