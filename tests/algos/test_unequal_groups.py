"""Groups of unequal size: NaN-padded rewards give each group what it would get alone."""

import pytest
import torch

from mmrlvr.algos.advantages import ADVANTAGES, EstimatorContext, estimate, flatten_groups, pad_groups, stateful

GROUPS = [torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0.5, 0.0]), torch.tensor([1.0, 0.2, float("nan"), 0.0, 0.7])]


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_padded_groups_get_each_group_alone(name):
    rewards, sizes = pad_groups(GROUPS)
    assert rewards.shape == (3, 5) and sizes == [4, 2, 5]
    flat = flatten_groups(estimate(name, rewards), sizes)
    alone = torch.cat([ADVANTAGES.get(name)(g.unsqueeze(0)).reshape(-1) for g in GROUPS])
    assert flat.shape == (11,)
    assert torch.allclose(flat, alone, atol=1e-6)
    # hand values for the 2-member group [0.5, 0.0] (rows 4-5): mean 0.25, unbiased std 0.3536;
    # rloo: [0.5 - 0.0, 0.0 - 0.5]
    hand = {"grpo": [0.25 / 0.353553, -0.25 / 0.353553], "dr_grpo": [0.25, -0.25], "rloo": [0.5, -0.5]}
    assert flat[4:6].tolist() == pytest.approx(hand[name], rel=1e-4)


def test_reinforce_pp_whitens_over_real_members_only():
    rewards, sizes = pad_groups(GROUPS)
    flat = flatten_groups(estimate("reinforce_pp", rewards), sizes)
    # centred per group, then whitened by the mean/std of the 10 scorable members (padding excluded)
    centred = torch.cat([g - g.nanmean() for g in GROUPS])
    vals = centred[~torch.isnan(centred)]
    expected = (centred - vals.mean()) / (vals.std() + 1e-6)
    expected[torch.isnan(centred)] = 0.0
    assert torch.allclose(flat, expected, atol=1e-6)


def test_rectangular_groups_flatten_as_before():
    r = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    assert torch.equal(flatten_groups(r, None), r.reshape(-1)) and torch.equal(flatten_groups(r, [2, 2]), r.reshape(-1))


def test_stateful_estimator_reads_the_context():
    from mmrlvr.data.sources import PromptStats

    stats = PromptStats()
    stats.update(1, ["a", "b"], torch.tensor([[1.0, 1.0], [0.0, float("nan")]]))

    @stateful
    def past_mean_baseline(rewards, context):  # r minus the prompt's mean reward over earlier steps
        means = [context.prompt_stats.mean(i) for i in context.sample_ids]
        return rewards - torch.tensor([[m if m is not None else 0.0] for m in means])

    ADVANTAGES.register("test_past_mean")(past_mean_baseline)
    try:
        out = estimate("test_past_mean", torch.tensor([[1.0, 0.0], [1.0, 1.0]]), EstimatorContext(["a", "b"], 2, stats))
    finally:
        ADVANTAGES._items.pop("test_past_mean")
    # a's past mean is (1 + 1) / 2 = 1; b's is 0 / 1 (the NaN is not counted)
    assert out.tolist() == [[0.0, -1.0], [1.0, 1.0]]
