"""The inverse-CDF draw (`mmrlvr.rollout.sampler`): hand-computed draws, never a zero-probability
token, frequencies that follow the tempered and truncated distribution, and in the engine the
same sampling settings as transformers' own draw."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.config import RolloutConfig
from mmrlvr.rollout import sampler
from mmrlvr.rollout.sampler import draw_inverse_cdf, sampling_processors


def _by_hand(weights: torch.Tensor, seed: int) -> torch.Tensor:
    """First index whose float64 running sum reaches u = (1 - U) * total, U the generator's draw."""
    g = torch.Generator().manual_seed(seed)
    u = (1.0 - torch.rand(weights.shape[0], 1, dtype=torch.float64, generator=g)) * weights.double().sum(-1, keepdim=True)
    return torch.searchsorted(weights.double().cumsum(-1), u).squeeze(1)


@pytest.mark.parametrize("block", [4, 3, 1024])
def test_draws_equal_the_inverse_cdf_by_hand(monkeypatch, block):
    """Ten entries in blocks of 4 (the last padded, the second all zero) or 3 or one block; rows of
    different weights, not normalised: every draw equals the hand-computed inverse CDF."""
    monkeypatch.setattr(sampler, "BLOCK", block)
    w = torch.tensor([[0.5, 0.0, 1.0, 0.25, 0.0, 0.0, 0.0, 0.0, 2.0, 0.25],
                      [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0],
                      [7.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.0]]).repeat(700, 1)
    got = draw_inverse_cdf(w, torch.Generator().manual_seed(11))
    assert torch.equal(got, _by_hand(w, 11))
    assert set(got[1::3].tolist()) == {9}  # a one-hot row
    assert set(got[0::3].tolist()) == {0, 2, 3, 8, 9} and set(got[2::3].tolist()) == set(range(9))  # every nonzero entry


def _fixed_uniform(monkeypatch, value: float):
    """Every uniform number of the draw set to `value` (u = (1 - value) * the row's total)."""
    real = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *a, **k: real(*a, **k).fill_(value))


def test_the_top_of_a_row_whose_block_sum_rounds_up_draws_its_last_nonzero_entry(monkeypatch):
    """u at the row's total (U = 0). A float32 block sum can exceed the same block's float64
    running sum (1 + 6e-8 rounds to 1 + 1.19e-7): the draw then lies past every entry of the
    block, and is the block's last nonzero entry, never a zero or an id past the vocabulary."""
    monkeypatch.setattr(sampler, "BLOCK", 4)
    _fixed_uniform(monkeypatch, 0.0)
    # a full block, and the vocabulary's last block, padded past V = 6
    for row, block, want in (([1.0, 6e-8, 0.0, 0.0], slice(0, 4), 1), ([0.0, 0.0, 0.0, 0.0, 1.0, 6e-8], slice(4, 6), 5)):
        w = torch.tensor([row])
        assert float(w[0, block].sum()) > 1.0 + 6e-8  # the float32 block sum rounds up
        got = int(draw_inverse_cdf(w)[0])
        assert got == want and w[0, got] > 0


def test_the_running_sum_of_blocks_keeps_masses_float32_would_round_away(monkeypatch):
    """One block of mass 1, then 100 blocks of 1e-9 each: in float32 1 + 1e-9 == 1, so a float32
    running sum would never reach a draw near the top of the row. The draw there (U = 1e-10) is in
    one of the small blocks, as the float64 inverse CDF by hand says."""
    monkeypatch.setattr(sampler, "BLOCK", 4)
    w = torch.cat([torch.tensor([[1.0, 0.0, 0.0, 0.0]]), torch.full((1, 400), 2.5e-10)], dim=1)
    _fixed_uniform(monkeypatch, 1e-10)
    got = int(draw_inverse_cdf(w)[0])
    u = (1.0 - 1e-10) * w.double().sum()
    assert got == int(torch.searchsorted(w.double().cumsum(-1)[0], u)) and got >= 4


def test_the_drawn_token_wins_generates_argmax_whatever_the_scores():
    """Scores above any finite stand-in (a low temperature makes them 1e4 and more): the drawn token
    is set to +inf, so the greedy argmax always takes it."""
    scores = torch.tensor([[2e4, 1.9e4, 0.0], [0.0, 3e4, 2.9e4]])
    drawn = sampler.InverseCdfSampler()(None, scores.clone())
    assert drawn.argmax(-1).tolist() == [0, 1] and torch.isinf(drawn).sum() == 2


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.sampled_from([0.0, 0.0, 1e-30, 1e-9, 0.3, 1.0, 5.0]), min_size=1, max_size=23)
                     .filter(lambda r: sum(r) > 0), min_size=1, max_size=6),
       block=st.sampled_from([1, 2, 3, 5, 1024]), seed=st.integers(0, 2**16))
def test_a_zero_probability_entry_is_never_drawn(rows, block, seed):
    width = max(map(len, rows))
    w = torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32).repeat(50, 1)
    old = sampler.BLOCK
    sampler.BLOCK = block
    try:
        got = draw_inverse_cdf(w, torch.Generator().manual_seed(seed))
    finally:
        sampler.BLOCK = old
    assert got.shape == (w.shape[0],) and got.dtype == torch.long
    assert bool((w.gather(1, got.unsqueeze(1)) > 0).all())


def _frequencies(scores: torch.Tensor, processors: list, n: int = 60_000) -> torch.Tensor:
    torch.manual_seed(0)
    counts = torch.zeros(scores.shape[-1], dtype=torch.float64)
    for start in range(0, n, 10_000):
        x = scores.expand(min(10_000, n - start), -1).clone()
        for p in processors:
            x = p(None, x)
        counts += torch.bincount(x.argmax(-1), minlength=scores.shape[-1])  # what generate's greedy step takes
    return counts / n


def test_frequencies_follow_the_tempered_truncated_distribution():
    """Temperature 0.5, top-k 6, top-p 0.9 on scores 0.5 * log q: tempering gives q; top-k keeps
    the first six (mass 0.94); top-p then drops 0.06 (0.06 / 0.94 = 0.064 of the ascending mass <=
    0.1) and keeps five, renormalised by 0.88. Frequencies within 5 sigma of that, zeros exact."""
    q = torch.tensor([0.3, 0.25, 0.15, 0.1, 0.08, 0.06, 0.04, 0.02])
    procs = sampling_processors(RolloutConfig(temperature=0.5, top_k=6, top_p=0.9))
    assert [type(p).__name__ for p in procs] == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper",
                                                "InverseCdfSampler"]
    f = _frequencies(0.5 * q.log(), procs)
    expected = torch.tensor([0.3, 0.25, 0.15, 0.1, 0.08, 0, 0, 0], dtype=torch.float64) / 0.88
    sigma = (expected * (1 - expected) / 60_000).sqrt()
    assert bool(((f - expected).abs() <= 5 * sigma + 1e-12).all()), (f, expected)


def test_frequencies_over_a_wide_vocabulary_match_the_softmax():
    """2,500 entries across three blocks, a third of them suppressed (-inf): chi-square per degree
    of freedom near 1 for 100,000 draws, and no suppressed entry drawn."""
    torch.manual_seed(1)
    scores = torch.randn(2500) * 2
    scores[::3] = -math.inf
    p = torch.softmax(scores, -1).double()
    f = _frequencies(scores, sampling_processors(RolloutConfig()), n=100_000)
    assert f[::3].sum() == 0
    counts, expected = f * 100_000, p * 100_000
    keep = expected > 20
    chi = float(((counts - expected) ** 2 / expected)[keep].sum() / keep.sum())
    assert 0.8 < chi < 1.2, chi


def test_only_the_draw_when_settings_are_neutral():
    assert [type(p).__name__ for p in sampling_processors(RolloutConfig())] == ["InverseCdfSampler"]


def test_top_k_one_draws_the_greedy_tokens(tiny):
    """top_k=1 leaves one token per step, so every one of the G draws is the greedy completion,
    through the shared prefill and through the repeated prompts alike."""
    from PIL import Image

    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.types import Sample

    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    q = lambda t: ({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]},)  # noqa: E731
    samples = [Sample("a", q("How many red shapes are there?"), 1, images=(Image.new("RGB", (112, 112), (200, 30, 30)),)),
               Sample("b", q("Hi"), 2, images=(Image.new("RGB", (112, 84), (30, 30, 200)),))]
    greedy = engine.rollout(samples, 1, RolloutConfig(max_new_tokens=10), seed=0, greedy=True)
    for shared in (True, False):
        out = engine.rollout(samples, 3, RolloutConfig(max_new_tokens=10, top_k=1, temperature=1.7,
                                                      shared_prefill=shared), seed=5)
        assert [c.token_ids for c in out.completions] == [c.token_ids for c in greedy.completions for _ in range(3)]
    # and without the cut the G draws differ
    out = engine.rollout(samples, 3, RolloutConfig(max_new_tokens=10, temperature=1.7), seed=5)
    assert len({tuple(c.token_ids) for c in out.completions}) > 2
