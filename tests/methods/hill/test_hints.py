"""HiLL's step on the real tiny model: which rows enter the update, with what rewards, advantages and
loss masks; the gates' penalty and the no-hint-passed quirk; reliance as the two forwards it is.

The verifier is replaced by a planned one (scores by sample id and position in the group), so the
hint rewards are hand-computable; generation, gates, encoding and forwards are the real ones."""

import collections
import dataclasses
import json

import pytest
import torch

from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.data.collate import encode_prompts
from mmrlvr.data.sources import SeededStream
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.methods.hill.episode import hinted_sample
from mmrlvr.tasks import load_task
from mmrlvr.methods.hill import hints as hill
from mmrlvr.train.learner import loss_mask
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.recipe.loop import _write_samples
from mmrlvr.recipe.step import advantages_for, collect
from mmrlvr.types import Verdict

ZEROS = [0.0] * 4
PLAN = {"p0": [1.0, 0.0, 1.0, 0.0], "p1#hint0": ZEROS, "p1#hint1": [1.0, 0.0, 0.0, 0.0], "p1#hint2": [1.0, 1.0, 0.0, 0.0]}


def planned_scorer(spec, texts, samples):
    """Scores from PLAN by (sample id, position among that id's rows); anything else 0."""
    seen = collections.Counter()
    out = []
    for s in samples:
        out.append(Verdict(PLAN.get(s.id, ZEROS)[seen[s.id]]))
        seen[s.id] += 1
    return out


def _prompts():
    base = load_task("counting", "train", 3, 0)
    # the leak gate looks for meta["answer"]: one no hint of the tiny model can contain
    return [dataclasses.replace(s, id=f"p{i}", meta={**s.meta, "answer": "never-in-a-hint"}) for i, s in enumerate(base)]


def _cfg(*extra):
    return resolve_config(load_config(None, [
        "rollout.prompts_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=6", "verifier_workers=0",
        "rollout.episode=hill", "rollout.episode_args={num_hints: 3, reward_type: non_deg, hint_tags: false, "
        "hinter_max_new_tokens: 5, hinter_template: 'Hint. {original_question} Wrong: {rollout_responses}'}", *extra]))


@pytest.fixture
def leak_second_hint(monkeypatch):
    """The real gate, except that the second hint of the first hard prompt is called a leak."""
    real, calls = hill.gate, []

    def gate(text, sample, settings, count):
        calls.append(sample.id)
        hint, status = real(text, sample, settings, count)
        return (hint, "leak") if len(calls) == 2 else (hint, status)
    monkeypatch.setattr(hill, "gate", gate)
    return calls


def test_the_best_mixed_hint_replaces_its_group_and_the_hints_are_a_group(tiny, leak_second_hint, tmp_path):
    model, processor = tiny
    cfg = _cfg()
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(_prompts(), 0), planned_scorer, cfg, seed=0)
    torch.set_num_threads(1)
    order = [s.id.split("#")[0] for s in batch.samples[:3]]
    p0, p1, p2 = (order.index(x) for x in ("p0", "p1", "p2"))
    hard = [x for x in order if x != "p0"]  # hinted in round order
    assert leak_second_hint[:3] == [hard[0]] * 3  # gates run hint by hint, hard prompt by hard prompt
    # p1 (hard): hint0 all wrong -> 0; hint1 leaked -> -0.2; hint2 half right:
    # non_deg = 1 - 0.5^4 - 0.5^4 = 0.875 -> hint2 replaces p1's group; p2's hints are all wrong: kept
    if hard[0] == "p2":  # the leak fell on p2's second hint: p1's hint1 passes (1 of 4: 0.6796875)
        p1_rewards, p2_rewards = [0.0, 0.6796875, 0.875], [0.0, -0.2, 0.0]
    else:
        p1_rewards, p2_rewards = [0.0, -0.2, 0.875], [0.0, 0.0, 0.0]
    assert batch.group_sizes == [4, 4, 4, 3, 3]
    assert batch.samples[p1].id == "p1#hint2" and batch.rewards[p1].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert batch.samples[p2].id == "p2" and batch.rewards[p2].tolist() == ZEROS
    assert batch.samples[p0].id == "p0" and batch.rewards[p0].tolist() == PLAN["p0"]
    hinters = {s.id: i for i, s in enumerate(batch.samples[3:], start=3)}
    assert set(hinters) == {"p1#hinter", "p2#hinter"}
    assert batch.rewards[hinters["p1#hinter"], :3].tolist() == pytest.approx(p1_rewards)
    assert batch.rewards[hinters["p2#hinter"], :3].tolist() == pytest.approx(p2_rewards)
    # the prompt source hears the round's own groups only, with their own rewards
    assert sorted(sid for sid, _ in batch.scored) == ["p0", "p1", "p2"]
    assert dict(batch.scored)["p1"] == ZEROS
    # rows: the hinted group's prompt carries the hint; the hinter's prompt is its template
    row = sum(batch.group_sizes[:p1])
    text = processor.tokenizer.decode(batch.prompt_inputs["input_ids"][row], skip_special_tokens=True)
    assert "Answer as <answer>N</answer>.\n\n" in text
    h = sum(batch.group_sizes[:hinters["p1#hinter"]])
    assert "Hint. How many red shapes" in processor.tokenizer.decode(batch.prompt_inputs["input_ids"][h])
    # loss masks: every sampled token of every row (hinted answers and hints alike) is trained
    assert batch.policy_mask is None
    assert torch.equal(loss_mask(batch, cfg.algo), batch.completion_mask.float())
    adv = advantages_for(batch, cfg)[:, 0]
    # hinted group [1, 1, 0, 0]: mean 0.5, unbiased std sqrt(1/3) = 0.57735 -> +-0.866025
    assert adv[row: row + 4].tolist() == pytest.approx([0.866025, 0.866025, -0.866025, -0.866025], abs=1e-5)
    # hinter group: GRPO over its 3 rewards, e.g. [0, -0.2, 0.875]: mean 0.225, devs -0.225 -0.425 0.65,
    # unbiased var 0.65375 / 2 = 0.326875, std 0.571730 -> [-0.393542, -0.743357, 1.136900]
    r = torch.tensor(p1_rewards)
    expect = ((r - r.mean()) / (r.std() + 1e-6)).tolist()
    assert adv[h: h + 3].tolist() == pytest.approx(expect, abs=1e-5)
    if hard[0] == "p1":
        assert expect == pytest.approx([-0.393542, -0.743357, 1.136900], abs=1e-5)
    m = batch.metrics
    assert m["hill/replaced_frac"] == pytest.approx(1 / 3) and m["hill/leak_frac"] == pytest.approx(1 / 6)
    assert m["hill/gate_pass_frac"] == pytest.approx(5 / 6)
    assert m["reward/hinter/mean"] == pytest.approx((sum(p1_rewards) + sum(p2_rewards)) / 6)
    assert m["reward/reasoner/mean"] == pytest.approx(2 / 12)
    assert m["hill/generated"] == 12 + 6 + 5 * 4  # answers, hints, re-rollouts of the 5 passing hints
    # the samples writer reads groups of unequal size: the hinter group's rows name their prompt and reward
    _write_samples(tmp_path, 1, batch, k=8)
    rows = [json.loads(x) for x in (tmp_path / "samples" / "step_1.jsonl").read_text().splitlines()]
    third = [x for x in rows if x["prompt"] == 3]
    assert [x["id"] for x in third] == [batch.samples[3].id] * 2
    assert [x["reward"] for x in third] == pytest.approx(batch.rewards[3, :2].tolist())
    assert [x["completion"] for x in third] == batch.texts[12:14]  # rows 12-13: after three groups of 4


def test_when_no_hint_passes_every_hint_scores_zero_and_nothing_is_replaced(tiny):
    model, processor = tiny
    cfg = _cfg()
    cfg.rollout.episode_args["max_hinted_prompt_tokens"] = 1  # every hinted prompt is overlong
    batch = collect(HFRolloutEngine(model, processor), SeededStream(_prompts(), 0), planned_scorer, cfg, seed=0)
    torch.set_num_threads(1)
    assert [s.id for s in batch.samples][:3] == [s.id for s in batch.samples][:3]
    assert {s.id for s in batch.samples[:3]} == {"p0", "p1", "p2"}
    # HiLL leaves the hint rewards empty when no hint passed (HT:824-827) and defaults them to 0 (HT:1114)
    assert batch.rewards[3:, :3].tolist() == [[0.0] * 3] * 2
    assert batch.metrics["hill/overlong_frac"] == 1.0 and batch.metrics["hill/replaced_frac"] == 0.0
    assert batch.metrics["hill/generated"] == 12 + 6


def test_too_few_hard_prompts_means_no_hints(tiny):
    model, processor = tiny
    cfg = _cfg()
    cfg.rollout.episode_args["min_hard_prompts"] = 3  # only 2 groups are all-incorrect
    batch = collect(HFRolloutEngine(model, processor), SeededStream(_prompts(), 0), planned_scorer, cfg, seed=0)
    torch.set_num_threads(1)
    assert batch.group_sizes is None and len(batch.samples) == 3
    assert batch.metrics["hill/hard_frac"] == pytest.approx(2 / 3) and "reward/hinter/mean" not in batch.metrics


def test_reliance_is_mean_logprob_without_the_hint_minus_with_it(tiny):
    model, processor = tiny
    cfg = _cfg("rollout.temperature=0.8")  # the learner's temperature, not 1
    engine = HFRolloutEngine(model, processor)
    sample = _prompts()[0]
    hinted = hinted_sample(sample, "count the red ones twice", 0)
    out = engine.rollout([hinted], 3, cfg.rollout, seed=1)
    torch.set_num_threads(1)
    delta = hill.reliance(engine, cfg, sample, out.prompt_inputs, out.completion_ids, out.completion_mask)
    for i in range(3):  # one row at a time, unpadded, each prompt encoded on its own
        n = int(out.completion_mask[i].sum())
        ids, mask = out.completion_ids[i:i + 1, :n], out.completion_mask[i:i + 1, :n]
        with torch.no_grad():
            kw = dict(temperature=cfg.rollout.temperature, suppress_ids=engine.suppress_ids)
            q = completion_logprobs(model, encode_prompts(processor, [sample]), ids, mask, **kw)[0].mean()
            qh = completion_logprobs(model, encode_prompts(processor, [hinted]), ids, mask, **kw)[0].mean()
        assert float(delta[i]) == pytest.approx(float(q - qh), abs=1e-4)  # padded batch vs one row: float rounding
    assert delta.abs().max() > 1e-3  # the hint changes the answers' likelihood
