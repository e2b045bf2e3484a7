import pytest
import torch

from mmrlvr.checks.resolve import resolve_algo
from mmrlvr.algos.sampling import GroupCollector, informative_groups, overlong_penalty, truncation_mask
from mmrlvr.config import AlgoConfig


def test_informative_groups():
    r = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [float("nan"), 0.0, 0.0], [float("nan"), float("nan"), 1.0]])
    assert informative_groups(r).tolist() == [True, False, False, False]


def test_overlong_penalty_hand_computed():
    # max_len 20, buffer 4: free up to 16, then -factor * (L - 16) / 4, capped at -factor
    lengths = torch.tensor([10, 16, 17, 18, 20, 25])
    pen = overlong_penalty(lengths, max_len=20, buffer=4, factor=0.5)
    assert torch.allclose(pen, torch.tensor([0.0, 0.0, -0.125, -0.25, -0.5, -0.5]))
    assert torch.equal(overlong_penalty(lengths, 20, 0), torch.zeros(6))


def test_truncation_mask():
    mask = torch.ones(2, 3)
    assert truncation_mask(torch.tensor([True, False]), mask).tolist() == [[0, 0, 0], [1, 1, 1]]


def test_group_collector_keeps_informative_then_tops_up():
    col = GroupCollector(target=3)
    col.add(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), ["a", "b"])
    assert not col.done and col.kept == ["a"] and col.dropped == ["b"]
    col.add(torch.tensor([[0.0, 0.0], [0.0, 1.0]]), ["c", "d"])
    assert col.rounds == 2 and col.kept == ["a", "d"]
    assert col.batch() == ["a", "d", "b"]  # topped up with a dropped group when rounds run out


def test_presets_fill_only_unset_fields():
    dapo = resolve_algo(AlgoConfig(algorithm="dapo"), max_new_tokens=20)
    assert (dapo.clip_low, dapo.clip_high, dapo.dynamic_sampling, dapo.kl_coef) == (0.2, 0.28, True, 0.0)
    assert dapo.overlong_buffer == 4 and dapo.aggregation == "token-mean"
    mine = resolve_algo(AlgoConfig(algorithm="dapo", clip_high=0.3), max_new_tokens=20)
    assert mine.clip_high == 0.3
    gspo = resolve_algo(AlgoConfig(algorithm="gspo"), 20)
    assert gspo.importance_level == "sequence"
    dr = resolve_algo(AlgoConfig(algorithm="dr_grpo"), 20)
    assert dr.advantage == "dr_grpo" and dr.norm_length == 20
    with pytest.raises(KeyError, match="known: dapo"):
        resolve_algo(AlgoConfig(algorithm="ppo2"), 20)
