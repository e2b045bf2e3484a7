"""A collect-time strategy that adds a group of another size (as a demonstration or a hinted
prompt would): the batch holds it NaN-padded, the advantages are each group's own, the update runs."""

import dataclasses

import pytest
import torch
from accelerate import Accelerator

from mmrlvr.algos.advantages import ADVANTAGES
from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import load_config
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.train.learner import Learner
from mmrlvr.data.sources import SeededStream
from mmrlvr.recipe.step import strategies_for, advantages_for, collect
from mmrlvr.verifiers.score import InProcessScorer


def add_pair_of_first_prompt(rnd, ctx):
    """Append a 2-completion group: the first prompt again with its first two completions, rewards 1 and 0."""
    comps = rnd.out.completions[:2]
    lps = [rnd.out.sampler_logprobs[i, : len(c.token_ids)] for i, c in enumerate(comps)]
    group = (rnd.prompts[0], comps, torch.tensor([1.0, 0.0]), rnd.verdicts[:2], lps)
    return dataclasses.replace(rnd, extra_groups=[*rnd.extra_groups, group])


def test_a_strategy_group_of_another_size_is_trained_on(tiny):
    model, processor = tiny
    cfg = resolve_config(load_config(None, ["rollout.prompts_per_step=3", "rollout.group_size=4",
                                            "rollout.max_new_tokens=6", "verifier_workers=0"]))
    engine = HFRolloutEngine(model, processor)
    batch = collect(engine, SeededStream(load_task("counting", "train", 6, 0), 0), InProcessScorer(), cfg,
                    seed=0, strategies=(*strategies_for(cfg), add_pair_of_first_prompt))
    assert batch.group_sizes == [4, 4, 4, 2] and batch.completion_ids.shape[0] == 14
    assert batch.rewards.shape == (4, 4) and torch.isnan(batch.rewards[3, 2:]).all()
    assert batch.sample_ids[3] == batch.sample_ids[0] and batch.sampler_logprobs.shape == batch.completion_ids.shape
    assert [s for s, _ in batch.scored][-1] == batch.sample_ids[0]  # the source hears about it too
    batch.rewards[:3] = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 1.0, 1.0]])
    adv = advantages_for(batch, cfg)
    # rows 12-13 are the pair: grpo of [1, 0] alone is [+0.7071, -0.7071] ((r - 0.5) / std 0.7071)
    assert adv[12:, 0].tolist() == pytest.approx([0.70710, -0.70710], abs=1e-4)
    alone = ADVANTAGES.get("grpo")(batch.rewards[:3]).reshape(-1)
    assert torch.allclose(adv[:12, 0], alone)
    # the prompt inputs have one row per completion: prompt 0 repeated for the pair
    assert batch.prompt_inputs["input_ids"].shape[0] == 14
    assert torch.equal(batch.prompt_inputs["input_ids"][12], batch.prompt_inputs["input_ids"][0])
    stats = Learner(cfg, model, torch.optim.SGD(model.parameters(), lr=0.0), Accelerator(cpu=True),
                    engine.suppress_ids).update(batch, adv, seed=0)
    torch.set_num_threads(1)
    assert stats["actor/updated_seqs_frac"] == pytest.approx(10 / 14)  # the all-zero group is skipped


def test_token_roles_name_the_right_prompt_and_reward_in_groups_of_unequal_size(tmp_path, tiny):
    """Rows of a 1-completion group after a 3-completion one: row 3 is prompt 1's, reward rewards[1, 0]."""
    import json

    from mmrlvr.methods.token_weighting.weigher import TokenWeighting, write_token_roles
    from mmrlvr.types import RolloutBatch, Sample, Verdict

    samples = [Sample("a", (), 1), Sample("b", (), 2)]
    rewards = torch.tensor([[0.25, 0.5, 0.75], [1.0, float("nan"), float("nan")]])
    ids = torch.tensor([[5, 6], [7, 0], [8, 9], [10, 11]])
    batch = RolloutBatch(samples, {}, ids, torch.ones_like(ids), torch.zeros(4, dtype=torch.bool), rewards,
                         ["w", "x", "y", "z"], [Verdict(0.0)] * 4, {}, group_sizes=[3, 1])
    assert batch.row_groups() == [(0, 0), (0, 1), (0, 2), (1, 0)] and batch.row_rewards() == [0.25, 0.5, 0.75, 1.0]
    tw = TokenWeighting(torch.ones(4, 2), rows=[2, 3])
    write_token_roles(tmp_path, 1, batch, torch.zeros(4, 1), tw, tiny[1].tokenizer, "none", k=2)
    recs = [json.loads(x) for x in (tmp_path / "token_roles" / "step_1.jsonl").read_text().splitlines()]
    assert [(r["sample_id"], r["reward"]) for r in recs] == [("a", 0.75), ("b", 1.0)]


def test_samples_and_token_roles_files_find_each_rows_group_when_groups_differ(tmp_path):
    """Groups of 2, 1 and 3 rows: row 3 is group 2's first (not N // B = 2 rows per group's group 1),
    its reward rewards[2, 0] (not the NaN padding at rewards.view(-1)[3])."""
    import json

    from mmrlvr.recipe.loop import _write_samples
    from mmrlvr.methods.token_weighting.weigher import TokenWeighting, write_token_roles
    from mmrlvr.types import RolloutBatch, Sample, Verdict

    nan = float("nan")
    samples = [Sample(f"p{i}", ({"role": "user", "content": "q"},), reference=i) for i in range(3)]
    rewards = torch.tensor([[0.1, 0.2, nan], [0.3, nan, nan], [0.4, 0.5, 0.6]])
    n = 6
    batch = RolloutBatch(samples, {}, torch.ones(n, 2, dtype=torch.long), torch.ones(n, 2, dtype=torch.long),
                         torch.zeros(n, dtype=torch.bool), rewards, [f"t{i}" for i in range(n)],
                         [Verdict(0.0)] * n, {}, group_sizes=[2, 1, 3])
    assert batch.row_groups() == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    tw = TokenWeighting(torch.ones(n, 2), rows=[3, 5])

    class Tok:
        def decode(self, ids):
            return "x"

    path = write_token_roles(tmp_path, 1, batch, torch.zeros(n, 1), tw, Tok(), "none")
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["sample_id"] for r in recs] == ["p2", "p2"]
    assert [r["reward"] for r in recs] == pytest.approx([0.4, 0.6])
    _write_samples(tmp_path, 1, batch)
    rows = [json.loads(x) for x in (tmp_path / "samples" / "step_1.jsonl").read_text().splitlines()]
    assert [(r["id"], r["completion"]) for r in rows] == [("p0", "t0"), ("p0", "t1"), ("p1", "t2"), ("p2", "t3"), ("p2", "t4")]
    assert [r["reward"] for r in rows] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
