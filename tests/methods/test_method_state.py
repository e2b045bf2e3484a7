"""A method's collect step reads and updates its own run-time state (what its `state` hook built),
and the loop checkpoints it under the method's name: a method with state is its folder, not edits
to the recipe."""

import dataclasses

from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.data.sources import SeededStream
from mmrlvr.methods.hooks import Live, Method
from mmrlvr.recipe.step import collect, strategies_for
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.verifiers.score import InProcessScorer


class Rounds:
    """A counter of the rounds its method's collect step saw (its whole state_dict)."""

    def __init__(self, saved: dict):
        self.n = int(saved.get("n", 0))

    def state_dict(self) -> dict:
        return {"n": self.n} if self.n else {}


def count_round(rnd, ctx):
    ctx.states["rounds"].n += 1  # its own state, by its name
    return dataclasses.replace(rnd, metrics={**rnd.metrics, "rounds/seen": ctx.states["rounds"].n})


def test_a_collect_step_updates_its_own_state_and_the_checkpoint_keeps_it(tiny):
    model, processor = tiny
    cfg = resolve_config(load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=2",
                                            "rollout.max_new_tokens=4", "verifier_workers=0",
                                            "algo.algorithm=dapo", "algo.max_rounds=3"]))
    record = Method("rounds", "explanation/methods.md", on=lambda c: True, state=lambda c, saved: Rounds(saved),
                    collect=count_round)
    live = Live([record], {"rounds": record.state(cfg, {"n": 5})})  # resumed at 5 rounds
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 8, 0), 0), InProcessScorer(), cfg, seed=0,
                    strategies=(*strategies_for(cfg), count_round), states=live.states)
    rounds = batch.metrics["rollout/rounds"]
    assert 1 <= rounds <= 3 and live.states["rounds"].n == 5 + rounds  # one call per round, on the saved count
    assert batch.metrics["rounds/seen"] == 6  # the first round's metrics: the count it left
    assert live.state_dicts() == {"rounds": {"n": 5 + rounds}}  # what the loop writes into the checkpoint
