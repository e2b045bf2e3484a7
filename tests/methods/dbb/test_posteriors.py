"""BetaPosteriors: dbb's per-prompt state across steps, duplicates in a batch, exact resume."""

from __future__ import annotations

import json

import pytest
import torch

from mmrlvr.methods.dbb.posteriors import BetaPosteriors, dbb


def test_visits_accumulate_per_prompt_and_match_dbb():
    post = BetaPosteriors(lam=0.8, eps=0.0)
    # step 1: a, b at the prior; step 2: b, c (c new); step 3: a
    post.advantages(["a", "b"], torch.tensor([[1.0, 0, 0, 1], [0.0, 0, 0, 0]]))
    # a: (.8 + 2, .8 + 2) = (2.8, 2.8); b: (.8, .8 + 4) = (.8, 4.8)
    assert sorted(post.ab) == ["a", "b"]
    assert post.ab["a"] == pytest.approx((2.8, 2.8)) and post.ab["b"] == pytest.approx((0.8, 4.8))
    adv = post.advantages(["b", "c"], torch.tensor([[0.0, 1, 0, 0], [1.0, 1, 1, 1]]))
    # b: (.64 + 1, 3.84 + 3) = (1.64, 6.84), p = 1.64 / 8.48; c: (.8 + 4, .8) = (4.8, .8)
    assert post.ab["b"] == pytest.approx((1.64, 6.84)) and post.ab["c"] == pytest.approx((4.8, 0.8))
    want, _, _ = dbb(torch.tensor([[0.0, 1, 0, 0]], dtype=torch.float64), torch.tensor([0.8], dtype=torch.float64),
                     torch.tensor([4.8], dtype=torch.float64), lam=0.8, eps=0.0)
    assert torch.allclose(adv[0], want[0].float())
    post.advantages(["a"], torch.tensor([[0.0, 0, 0, 0]]))
    assert post.ab["a"] == pytest.approx((2.24, 6.24))  # (.8 * 2.8, .8 * 2.8 + 4)
    assert post.metrics()["dbb/prompts"] == 3.0


def test_a_prompt_twice_in_a_batch_is_two_visits_in_order():
    post = BetaPosteriors(lam=0.5, eps=0.0)
    adv = post.advantages(["x", "x"], torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    # first: (.5 + 2, .5) = (2.5, .5); second: (1.25, .25 + 2) = (1.25, 2.25)
    assert post.ab["x"] == pytest.approx((1.25, 2.25))
    # second row's p = 1.25 / 3.5 = .357143, sd = .479157 -> -.745356
    assert adv[1].tolist() == pytest.approx([-0.745356] * 2, abs=1e-5)


def test_json_round_trip_continues_identically():
    a, b = BetaPosteriors(lam=0.7), BetaPosteriors(lam=0.7)
    g = torch.Generator().manual_seed(0)
    batches = [(["p", "q", "r"][: 1 + i % 3], (torch.rand(1 + i % 3, 4, generator=g) > 0.5).float()) for i in range(8)]
    for ids, r in batches[:4]:
        a.advantages(ids, r)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for ids, r in batches[4:]:
        assert torch.equal(a.advantages(ids, r), b.advantages(ids, r))
    assert a.state_dict() == b.state_dict()
