"""A collect strategy's extra group is a `Group` record; one written as a plain tuple in field order
(bonus left out or given) is read the same, so both make the same batch, bit for bit."""

import dataclasses

import torch

from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.data.sources import SeededStream
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.recipe.step import strategies_for, collect
from mmrlvr.types import Group
from mmrlvr.verifiers.score import InProcessScorer

NAN = float("nan")


def _pair(rnd, as_tuple: bool):
    comps = rnd.out.completions[:2]
    lps = [rnd.out.sampler_logprobs[i, : len(c.token_ids)] for i, c in enumerate(comps)]
    fields = (rnd.prompts[0], comps, torch.tensor([1.0, 0.0]), rnd.verdicts[:2], lps, torch.tensor([0.5, 0.25]))
    return fields if as_tuple else Group(*fields)


def _collect(tiny, as_tuple: bool):
    model, processor = tiny
    cfg = resolve_config(load_config(None, ["rollout.prompts_per_step=2", "rollout.group_size=3",
                                            "rollout.max_new_tokens=4", "verifier_workers=0"]))

    def add_pair(rnd, ctx):
        return dataclasses.replace(rnd, extra_groups=[*rnd.extra_groups, _pair(rnd, as_tuple)])

    return collect(HFRolloutEngine(model, processor), SeededStream(load_task("counting", "train", 4, 0), 0),
                   InProcessScorer(), cfg, seed=0, strategies=(*strategies_for(cfg), add_pair))


def test_a_tuple_is_read_as_the_record_with_its_fields_named():
    five = ("p", ["c"], torch.tensor([1.0]), ["v"], [None])
    grp = Group.of(five)
    assert (grp.prompt, grp.completions, grp.verdicts, grp.sampler_logprobs, grp.bonus) == ("p", ["c"], ["v"], [None], None)
    assert Group.of(grp) is grp
    assert torch.equal(Group.of((*five, torch.tensor([0.5]))).bonus, torch.tensor([0.5]))


def test_a_group_record_and_its_tuple_make_the_same_batch(tiny):
    record, plain = _collect(tiny, as_tuple=False), _collect(tiny, as_tuple=True)
    assert record.group_sizes == plain.group_sizes == [3, 3, 2]
    # the round's own groups carry no bonus (zeros); the pair's is padded with NaN like its rewards
    want = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.25, NAN]])
    for batch in (record, plain):
        assert torch.equal(batch.bonus.nan_to_num(-1), want.nan_to_num(-1))
    for name in ("completion_ids", "completion_mask", "sampler_logprobs", "truncated"):
        assert torch.equal(getattr(record, name), getattr(plain, name)), name
    assert torch.equal(record.rewards.nan_to_num(-1), plain.rewards.nan_to_num(-1))
    assert record.sample_ids == plain.sample_ids and record.scored == plain.scored
