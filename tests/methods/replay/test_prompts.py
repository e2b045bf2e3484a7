"""Prompt replay: the queue's order and every rule, hand-traced with a simulated learner."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from mmrlvr.methods.replay.prompts import PromptReplay
from mmrlvr.types import Sample

G = 8


def samples(n: int) -> list[Sample]:
    return [Sample(f"p{i}", (), None) for i in range(n)]


def stream_order(seed: int, n: int, epoch: int) -> list[str]:
    """Today's SeededStream recipe: a seeded shuffle of all samples per pass."""
    order = list(range(n))
    random.Random(f"data-{seed}-{epoch}").shuffle(order)
    return [f"p{i}" for i in order]


def group(k: int, g: int = G) -> list[float]:
    return [1.0] * k + [0.0] * (g - k)  # k of g completions correct: pass rate k / g


def ids(batch) -> list[str]:
    return [s.id for s in batch]


def test_no_replay_gives_todays_stream_exactly():
    from mmrlvr.data.sources import SeededStream

    data = samples(10)
    src, today = PromptReplay(data, seed=7), SeededStream(data, seed=7)
    for step in range(9):  # 9 x 4 = 36 prompts: three passes and a wrap inside a batch
        got = src.take(4, step)
        assert ids(got) == ids(today.take(4))
        src.feedback(step, ids(got), [group(0)] * 4)  # pass rate 0: nothing ever queues
        assert src.metrics() == {"replay/frac": 0.0, "replay/queue": 0.0, "replay/mean_reuse": 0.0}
    assert ids(PromptReplay(data, seed=7).take(10, 0)) == stream_order(7, 10, 0)


def test_simulated_learner_hand_traced():
    # 12 prompts, s0..s11 = the stream's first pass; P = 4, budget min(floor(4 * 0.5), 2) = 2,
    # cooldown 2, max_reuse 2, window [0.24, 0.7]; G = 8. The learner gets one more of the 8
    # completions right each time it trains on a prompt.
    s = stream_order(3, 12, 0)
    k = dict(zip(s, [4, 2, 0, 6, 3, 8, 5, 1, 0, 0, 0, 0]))
    src = PromptReplay(samples(12), seed=3, fraction=0.5, cooldown=2, max_reuse=2)

    def run(step, queued_in_flight=None):
        batch = ids(src.take(4, step))
        if queued_in_flight is not None:  # replays leave the queue until their feedback
            assert src.queue_order() == queued_in_flight
        src.feedback(step, batch, [group(k[i]) for i in batch])
        for i in batch:
            k[i] = min(G, k[i] + 1)
        return batch

    # step 0: fresh s0..s3, rates .5 .25 0 .75 -> queue s0 (|.5-.5| = 0), s1 (.25); s2 (0) and s3 (> .7) stay out
    assert run(0) == s[0:4]
    assert src.queue_order() == [s[0], s[1]]
    # step 1: s0, s1 sampled at step 0: 1 - 0 < cooldown 2 -> no replay; fresh s4..s7 with rates
    # .375 1 .625 .125 -> s4 and s6 enter (distance .125, lower rate first); s5 > .7, s7 < .24
    assert run(1) == s[4:8]
    assert src.queue_order() == [s[0], s[4], s[6], s[1]]
    assert src.metrics() == {"replay/frac": 0.0, "replay/queue": 4.0, "replay/mean_reuse": 0.0}
    # step 2: s0 (2 - 0 = 2 >= 2) replayed; s4, s6 sampled at 1 (cooling); s1 replayed; fresh s8, s9
    assert run(2, queued_in_flight=[s[4], s[6]]) == [s[0], s[1], s[8], s[9]]
    assert src.metrics() == {"replay/frac": 0.5, "replay/queue": 4.0, "replay/mean_reuse": 1.0}
    # s0 now 5/8 = .625 (reuse 1), s1 3/8 = .375 (reuse 1): all four at distance .125;
    # lower rate first, then fewer reuses: s4 (.375, 0), s1 (.375, 1), s6 (.625, 0), s0 (.625, 1)
    assert src.queue_order() == [s[4], s[1], s[6], s[0]]
    # step 3: s4 (3 - 1 = 2) replayed, s1 (3 - 2 = 1) cooling, s6 replayed; fresh s10, s11
    assert run(3) == [s[4], s[6], s[10], s[11]]
    # s4: 4/8 = .5 back in front; s6: 6/8 = .75 leaves the window
    assert src.queue_order() == [s[4], s[1], s[0]]
    # step 4: s4 (4 - 3 = 1) cooling; s1 and s0 (4 - 2 = 2) replayed -> reuse 2 each; the second
    # pass starts: its prompts that are this step's replays are skipped
    t = [i for i in stream_order(3, 12, 1) if i not in (s[0], s[1])]
    assert run(4) == [s[1], s[0], t[0], t[1]]
    assert src.metrics()["replay/mean_reuse"] == 2.0
    # s1 is at 4/8 = .5, inside the window, but has been replayed max_reuse = 2 times: retired
    assert s[1] not in src.queue_order() and s[0] not in src.queue_order()
    assert src.queue_order()[0] == s[4]


def test_budget_caps_replays_at_half_the_batch():
    src = PromptReplay(samples(3), 0, fraction=0.3)
    assert [src.budget(n) for n in (1, 2, 7, 10)] == [0, 0, 2, 3]  # floor(.3 n): .3 .6 2.1 3
    src = PromptReplay(samples(3), 0, fraction=0.9)  # capped at 0.5
    assert src.fraction == 0.5
    assert [src.budget(n) for n in (1, 2, 7, 10)] == [0, 1, 3, 5]  # min(floor(.5 n), n // 2)
    # with 6 queued, eligible prompts and P = 7, fraction 0.9: 3 replays, 4 fresh
    src = PromptReplay(samples(20), 0, fraction=0.9, cooldown=0)
    first = ids(src.take(6, 0))
    src.feedback(0, first, [group(4)] * 6)
    batch = ids(src.take(7, 1))
    assert sorted(batch[:3]) == sorted(src.samples[i].id for i in sorted(src._index[j] for j in first)[:3])
    assert not set(batch[3:]) & set(first) and src.metrics()["replay/frac"] == pytest.approx(3 / 7)


def test_the_budget_holds_per_step_across_dynamic_sampling_rounds():
    """P = 6, fraction 0.5: a step holds min(floor(6 * .5), 6 // 2) = 3 replays in all. 8 prompts are
    queued; round 1 takes 3 of them and 3 fresh; dynamic sampling's round 2 for the same step
    (4 more prompts: budget(4) = 2 on its own) takes no replay, and neither does round 3."""
    src = PromptReplay(samples(40), 0, fraction=0.5, cooldown=0)
    first = ids(src.take(8, 0))
    src.feedback(0, first, [group(4)] * 8)
    queued = src.queue_order()
    assert len(queued) == 8
    round1 = ids(src.take(6, 1))
    assert round1[:3] == queued[:3] and not set(round1[3:]) & set(first)
    round2 = ids(src.take(4, 1))
    round3 = ids(src.take(2, 1))
    assert not set(round2 + round3) & set(first)  # all fresh: the step's 3 replays are spent
    assert src.metrics()["replay/frac"] == pytest.approx(3 / 12)
    src.feedback(1, round1 + round2 + round3, [group(0)] * 12)
    nxt = ids(src.take(6, 2))  # a new step: a new budget of 3, the next best queued prompts
    assert nxt[:3] == queued[3:6]


def test_in_flight_and_already_in_batch_are_never_replayed():
    src = PromptReplay(samples(20), 0, fraction=0.5, cooldown=0)
    first = ids(src.take(4, 0))
    src.feedback(0, first, [group(4), group(3), group(0), group(8)])  # queue: first[0], first[1]
    assert src.queue_order() == first[:2]
    second = ids(src.take(4, 1))
    assert second[:2] == first[:2]
    # no feedback yet: both in flight, so step 2 replays nothing even with cooldown 0
    third = ids(src.take(4, 2))
    assert not set(third) & set(first)
    src.feedback(1, second, [group(4), group(4), group(0), group(0)])
    src.feedback(2, third, [group(0)] * 4)
    # step 3 replays them again (both .5 with reuse 1: dataset index order); once fed back, a
    # second call for step 3 (dynamic sampling) finds them not in flight, cooled (cooldown 0),
    # but already in this step's batch
    again = ids(src.take(4, 3))
    assert again[:2] == sorted(first[:2], key=lambda i: int(i[1:]))
    src.feedback(3, again, [group(4), group(4), group(0), group(0)])
    more = ids(src.take(4, 3))
    assert not set(more) & set(first[:2])
    assert src.metrics()["replay/frac"] == pytest.approx(2 / 8)


def test_a_queued_prompt_taken_fresh_is_in_flight_until_its_feedback():
    src = PromptReplay(samples(2), 5, cooldown=0)  # P = 2: budget 1
    a, b = ids(src.take(2, 0))
    src.feedback(0, [a, b], [group(4), group(3)])
    assert src.queue_order() == [a, b]
    # step 1: a replayed; the stream's next pass gives b (a, this step's replay, is skipped)
    assert ids(src.take(2, 1)) == [a, b]
    # no feedback for step 1: b is still queued but in flight, so step 2 has no replay
    src.take(2, 2)
    assert src.queue_order() == [b] and src.metrics()["replay/frac"] == 0.0


def test_pass_rate_scaled_nan_and_zero_rules():
    src = PromptReplay(samples(6), 1, min_pass_rate=0.0, max_pass_rate=0.75, max_reward=2.0)
    batch = ids(src.take(4, 0))
    nan = float("nan")
    src.feedback(0, batch, np.array([
        [2.0, 2.0, 0.0, 0.0],  # mean 1 / max 2 = .5 -> in
        [0.0, 0.0, 0.0, 0.0],  # 0: never queued, even with min_pass_rate 0
        [2.0, nan, 2.0, 0.0],  # NaN ignored: mean 4/3 / 2 = .667 -> in
        [nan, nan, nan, nan],  # unscorable: no pass rate, flight ended
    ]))
    assert src.queue_order() == [batch[0], batch[2]]
    assert src.pass_rate[src._index[batch[2]]] == pytest.approx(2 / 3)
    assert src._index[batch[3]] not in src.pass_rate and not src.in_flight
    with pytest.raises(ValueError, match="not in flight"):
        src.feedback(0, batch[:1], [[1.0] * 4])
    with pytest.raises(KeyError, match="unknown sample id 'nope'"):
        src.feedback(0, ["nope"], [[1.0] * 4])


def test_window_bounds_are_inclusive():
    src = PromptReplay(samples(8), 2, min_pass_rate=0.25, max_pass_rate=0.75)
    batch = ids(src.take(4, 0))
    src.feedback(0, batch, [group(2), group(6), group(1), group(7)])  # .25 .75 in; .125 .875 out
    # .25 and .75 are both .25 from .5: the lower rate first
    assert src.queue_order() == [batch[0], batch[1]]


@pytest.mark.parametrize("kwargs, word", [
    ({"fraction": -0.1}, "fraction"), ({"cooldown": -1}, "cooldown"), ({"max_reuse": 0}, "max_reuse"),
    ({"min_pass_rate": 0.8}, "min_pass_rate"), ({"max_reward": 0.0}, "max_reward"),
])
def test_bad_settings_are_one_line(kwargs, word):
    with pytest.raises(ValueError, match=word) as exc:
        PromptReplay(samples(2), 0, **kwargs)
    assert "\n" not in str(exc.value)


def test_duplicate_ids_refused():
    with pytest.raises(ValueError, match="'p0' appears twice"):
        PromptReplay(samples(2) + samples(1), 0)


def _learner_rewards(step: int, sid: str, trained: dict) -> list[float]:
    # pass probability rises by 0.08 per training visit, from a per-prompt start
    p = min(1.0, (int(sid[1:]) % 5) / 8 + 0.08 * trained.get(sid, 0))
    rng = np.random.default_rng([step, int(sid[1:])])
    return [float(x) for x in (rng.random(G) < p)]


def _drive(src, steps, trained, log):
    for step in steps:
        batch = ids(src.take(6, step))
        src.feedback(step, batch, [_learner_rewards(step, i, trained) for i in batch])
        for i in batch:
            trained[i] = trained.get(i, 0) + 1
        log.append((batch, src.metrics()))


def test_state_dict_round_trip_mid_run_continues_identically():
    kw = dict(fraction=0.5, cooldown=2, max_reuse=3)
    a = PromptReplay(samples(15), 4, **kw)
    trained, log_a = {}, []
    _drive(a, range(8), trained, log_a)
    assert any(m["replay/frac"] > 0 for _, m in log_a)  # the run did replay
    mid = json.loads(json.dumps(a.state_dict()))  # through JSON, as a checkpoint would
    trained_b = dict(trained)
    b = PromptReplay(samples(15), 4, **kw)
    b.load_state_dict(mid)
    log_b: list = []
    _drive(a, range(8, 20), trained, log_a)
    _drive(b, range(8, 20), trained_b, log_b)
    assert log_b == log_a[8:]
    assert b.state_dict() == a.state_dict()
    with pytest.raises(ValueError, match="seed 4"):
        PromptReplay(samples(15), 5, **kw).load_state_dict(mid)


def test_a_copy_looks_ahead_without_changing_the_source():
    import copy

    src = PromptReplay(samples(10), 0, cooldown=0)
    batch = ids(src.take(4, 0))
    src.feedback(0, batch, [group(4)] * 4)
    before = json.dumps(src.state_dict())
    peek = copy.copy(src)
    assert ids(peek.take(4, 1)) == ids(src.take(4, 1)) and json.dumps(peek.state_dict()) == json.dumps(src.state_dict())
    peek.take(4, 2)
    peek.feedback(1, batch[:1], [group(8)])
    assert json.dumps(copy.copy(src).state_dict()) != before  # src moved on by its own take only
    src2 = PromptReplay(samples(10), 0, cooldown=0)
    src2.load_state_dict(json.loads(before))
    src2.take(4, 1)
    assert src2.state_dict() == src.state_dict()
