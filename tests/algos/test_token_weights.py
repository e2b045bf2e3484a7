import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.algos.token_weights import (
    BOTH, METHODS, OTHER, PAD, PERCEPTION, REASONING, entropy_topk, label_stats, token_labels,
    token_weights, topk_mask, visual_dependency,
)


def close(a, b, tol=1e-4):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float), torch.as_tensor(b, dtype=torch.float), atol=tol)


def test_visual_dependency_hand_values():
    logp = torch.tensor([[-1.0, -2.0, -3.0, -1.0, -25.0, -1.0]])
    corrupt = torch.tensor([[-1.0, -3.0, -2.0, 4.0, -1.0, -9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    d = visual_dependency(logp, corrupt, mask)
    # delta = corrupt - logp: 0, -1, +1, +5, +24 (clamped to 20), -8 (padding)
    # d = e^delta - delta - 1: 0; e^-1 + 1 - 1 = 0.36788; e - 2 = 0.71828; e^5 - 6 = 142.4 -> 10;
    # e^20 - 21 -> 10; padding -> 0
    assert close(d, [[0.0, math.exp(-1), math.e - 2, 10.0, 10.0, 0.0]])


def test_visual_dependency_negative_clamp():
    # delta = -30 -> clamped to -20: e^-20 + 20 - 1 = 19.0 -> clamped to 10
    d = visual_dependency(torch.tensor([[0.0]]), torch.tensor([[-30.0]]), torch.tensor([[1]]))
    assert close(d, [[10.0]])


def test_entropy_topk_hand_values():
    ent = torch.tensor([[0.1, 0.9, 0.5, 7.0], [0.3, 0.8, 0.2, 0.4]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    # 7 valid tokens; k = ceil(0.2 * 7) = 2 -> entropies 0.9 and 0.8; the padded 7.0 never counts
    assert close(entropy_topk(ent, mask, 0.2), [[0, 1, 0, 0], [0, 1, 0, 0]])
    # k = ceil(0.5 * 7) = 4 -> 0.9, 0.8, 0.5, 0.4
    assert close(entropy_topk(ent, mask, 0.5), [[0, 1, 1, 0], [0, 1, 0, 1]])


def test_entropy_topk_k_ignores_float_noise():
    # 0.28 * 25 = 7.000000000000001 and 0.14 * 50 = 7.000000000000001 in floats: k must be 7, not 8
    # (0.2 * 15 is exactly 3.0 and would not tell)
    for frac, n in ((0.28, 25), (0.14, 50)):
        assert frac * n > 7
        ent = torch.arange(n, dtype=torch.float).view(1, n)
        assert entropy_topk(ent, torch.ones(1, n), frac).sum() == 7


def test_topk_per_row_keeps_ties():
    dep = torch.tensor([[1.0, 3.0, 0.0, 9.0], [2.0, 2.0, 2.0, 2.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    # row 0: k = ceil(0.4 * 3) = 2 -> 3.0 and 1.0; row 1: k = 2 but all four tie at 2.0
    assert close(topk_mask(dep, mask, 0.4, per_row=True), [[1, 1, 0, 0], [1, 1, 1, 1]])


def test_topk_exact_breaks_ties_by_position():
    dep = torch.tensor([[1.0, 3.0, 0.0, 9.0], [2.0, 2.0, 2.0, 2.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    # row 1: k = ceil(0.4 * 4) = 2 of four ties -> the first two positions
    assert close(topk_mask(dep, mask, 0.4, per_row=True, exact=True), [[1, 1, 0, 0], [1, 1, 0, 0]])
    # batch-wide (row-major): 7 valid, k = ceil(2.8) = 3: 3.0, then the 2.0s at (1, 0), (1, 1)
    assert close(topk_mask(dep, mask, 0.4, exact=True), [[0, 1, 0, 0], [1, 1, 0, 0]])


def test_vppo_hand_values():
    dep = torch.tensor([[1.0, 3.0, 0.0, 5.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    w = token_weights("vppo", {"visual_dependency": dep}, mask, vppo_top_frac=0.4, vppo_beta_min=0.9)
    # response means 4/3, 2, 0 -> min-max normalised 2/3, 1, 0, whose mean is 5/9;
    # beta = 0.9 + 0.1 * norm / (5/9) = 1.02, 1.08, 0.9 (mean 1)
    # exactly k = ceil(0.4 |o_i|) per response: row 0 k = 2 (3.0, 1.0); row 1 k = 2 of four ties
    # (the first two); row 2 k = ceil(0.8) = 1 of two ties at 0 (the first)
    assert close(w, [[1.02, 1.02, 0, 0], [1.08, 1.08, 0, 0], [0.9, 0, 0, 0]])


def test_vppo_sparse_response_keeps_exactly_k():
    # 10 tokens, 8 of them confident (dependency exactly 0.0) -> k = ceil(0.4 * 10) = 4:
    # the two dependent tokens (positions 3 and 7) and the first two zeros (positions 0 and 1).
    # Keeping ties would give all 10 tokens weight 1: no selection at all.
    dep = torch.zeros(1, 10)
    dep[0, 3], dep[0, 7] = 0.5, 2.0
    w = token_weights("vppo", {"visual_dependency": dep}, torch.ones(1, 10), vppo_top_frac=0.4)
    assert close(w, [[1, 1, 0, 1, 0, 0, 0, 1, 0, 0]])  # one response: beta = 1
    labels = token_labels(torch.arange(10.0)[None] / 10, dep, torch.ones(1, 10), perception_frac=0.3,
                          reasoning_frac=0.1)
    # perception: k = 3 -> positions 7 and 3, then the first of the eight zeros (position 0);
    # reasoning: k = 1 -> the highest entropy, position 9. Keeping ties would label all ten perception.
    assert (labels == PERCEPTION).nonzero()[:, 1].tolist() == [0, 3, 7]
    assert (labels == REASONING).nonzero()[:, 1].tolist() == [9]
    # entropy ties too (confident tokens: entropy 0): reasoning k = 2 -> position 5, then position 0
    ent = torch.zeros(1, 10)
    ent[0, 5] = 1.0
    labels = token_labels(ent, dep, torch.ones(1, 10), perception_frac=0.1, reasoning_frac=0.2)
    assert (labels == REASONING).nonzero()[:, 1].tolist() == [0, 5]
    assert (labels == PERCEPTION).nonzero()[:, 1].tolist() == [7]


def test_pepo_minmax_hand_values():
    s = torch.tensor([[0.0, 1.0, 0.5], [0.0, 1.0, 3.0]])
    h = torch.tensor([[1.0, 0.0, 0.5], [2.0, 2.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    sig = {"visual_similarity": s, "entropy": h}
    w = token_weights("pepo", sig, mask, progress=1.0, pepo_variant="minmax")
    # row 0: s, h already in [0, 1]; s + h = 1 everywhere -> gate 1; softmax([0, 1, .5] / 1.8) * 3
    #   = [0.73835, 1.28688, 0.97477]
    # row 1 (2 valid tokens): s -> [0, 1], h constant -> [0, 0]; s + h - mean = [-.5, .5];
    #   g = 1 + 0.05 tanh(+-0.5) = [0.97689, 1.02311]; softmax([0, 1.02311 / 1.8]) * 2 = [0.72322, 1.27678]
    assert close(w, [[0.73835, 1.28688, 0.97477], [0.72322, 1.27678, 0.0]])
    # progress 0.5: 0.5 + 0.5 w
    half = token_weights("pepo", sig, mask, progress=0.5, pepo_variant="minmax")
    assert close(half[0], [0.86918, 1.14344, 0.98738])
    # progress 0: plain GRPO weights
    assert close(token_weights("pepo", sig, mask, progress=0.0, pepo_variant="minmax"), mask.float())


def test_pepo_released_softmax_over_raw_similarity():
    # raw cosines with the ~0.1 spread of real models; the released softmax reads them as they are
    s = torch.tensor([[0.20, 0.30, 0.25], [0.10, 0.20, 0.90]])
    h = torch.tensor([[1.0, 0.0, 0.5], [2.0, 2.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    sig = {"visual_similarity": s, "entropy": h}
    w = token_weights("pepo", sig, mask, progress=1.0, pepo_gate=0.5, pepo_temperature=0.1)
    # row 0: s_norm = [0, 1, .5], h_norm = [1, 0, .5]: s + h = 1 -> gate 1;
    #   softmax([.2, .3, .25] / 0.1) * 3 = 3 [e^2, e^3, e^2.5] / 39.657 = [0.55899, 1.51947, 0.92154]
    # row 1: s_norm = [0, 1], h_norm = [0, 0], centred [-.5, .5]; g = 1 + 0.5 tanh(+-.5) = [0.76894, 1.23106];
    #   logits [.1 * .76894, .2 * 1.23106] / 0.1 = [0.76894, 2.46212]; softmax * 2 = [0.31069, 1.68931]
    assert close(w, [[0.55899, 1.51947, 0.92154], [0.31069, 1.68931, 0.0]])
    # the default variant is the released one; at the default temperature 1.8 a 0.1 spread moves
    # the weights by a few percent: softmax([.2, .3, .25] / 1.8) * 3 = [0.97238, 1.02790, 0.99972]
    assert close(token_weights("pepo", sig, mask)[0], [0.97238, 1.02790, 0.99972])
    with pytest.raises(ValueError, match="known: released, minmax"):
        token_weights("pepo", sig, mask, pepo_variant="paper")


def test_tor_and_labels_hand_values():
    ent = torch.tensor([[0.9, 0.1, 0.2, 5.0], [0.3, 0.8, 0.1, 0.1]])
    dep = torch.tensor([[0.1, 5.0, 0.2, 9.0], [4.0, 0.1, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    labels = token_labels(ent, dep, mask, perception_frac=0.3, reasoning_frac=0.3)
    # 7 valid tokens, k = ceil(2.1) = 3 for each: dependency top 3 = 5.0, 4.0, 0.2;
    # entropy top 3 = 0.9, 0.8, 0.3; the token with dep 4.0 and entropy 0.3 is both
    assert labels.tolist() == [[REASONING, PERCEPTION, PERCEPTION, PAD], [BOTH, REASONING, OTHER, OTHER]]
    w = token_weights("tor", {"entropy": ent, "visual_dependency": dep}, mask, perception_frac=0.3, reasoning_frac=0.3)
    # raw: [1.5, 1.5, 1.5, 0], [2, 1.5, .5, .5], sum 9 over 7 tokens -> times 7/9
    assert close(w, [[1.5 * 7 / 9] * 3 + [0], [2 * 7 / 9, 1.5 * 7 / 9, 0.5 * 7 / 9, 0.5 * 7 / 9]])
    stats = label_stats(labels, w)
    assert stats["tokens/perception_frac"] == pytest.approx(2 / 7)
    assert stats["tokens/reasoning_frac"] == pytest.approx(2 / 7)
    assert stats["tokens/both_frac"] == pytest.approx(1 / 7)
    assert stats["tokens/other_frac"] == pytest.approx(2 / 7)
    assert stats["tokens/weight_both"] == pytest.approx(14 / 9)
    assert stats["tokens/weight_other"] == pytest.approx(3.5 / 9)


def test_tor_non_default_coefficients_land_on_their_labels():
    ent = torch.tensor([[0.9, 0.1, 0.2, 5.0], [0.3, 0.8, 0.1, 0.1]])
    dep = torch.tensor([[0.1, 5.0, 0.2, 9.0], [4.0, 0.1, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    # labels as above: [[R, P, P, pad], [B, R, O, O]]; all four coefficients differ, so a swap shows
    w = token_weights("tor", {"entropy": ent, "visual_dependency": dep}, mask, perception_frac=0.3,
                      reasoning_frac=0.3, tor_perception=2.0, tor_reasoning=3.0, tor_both=5.0, tor_other=1.0)
    # raw [[3, 2, 2, 0], [5, 3, 1, 1]], sum 17 over 7 tokens -> times 7/17
    assert close(w, [[3 * 7 / 17, 2 * 7 / 17, 2 * 7 / 17, 0], [5 * 7 / 17, 3 * 7 / 17, 7 / 17, 7 / 17]])
    # tor_other = 0 masks the other tokens out: raw [[3, 2, 2, 0], [5, 3, 0, 0]], sum 15 -> times 7/15
    w0 = token_weights("tor", {"entropy": ent, "visual_dependency": dep}, mask, perception_frac=0.3,
                       reasoning_frac=0.3, tor_perception=2.0, tor_reasoning=3.0, tor_both=5.0, tor_other=0.0)
    assert close(w0[1], [5 * 7 / 15, 3 * 7 / 15, 0, 0])


def test_entropy_topk_method_and_none():
    ent = torch.tensor([[0.1, 0.9], [0.3, 0.2]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert close(token_weights("none", {}, mask), mask)
    assert close(token_weights("entropy_topk", {"entropy": ent}, mask, top_frac=0.2), [[0, 1], [0, 0]])


def test_missing_signal_and_unknown_method_are_clear_errors():
    with pytest.raises(KeyError, match="needs signals"):
        token_weights("vppo", {"entropy": torch.zeros(1, 1)}, torch.ones(1, 1))
    with pytest.raises(KeyError, match="known: entropy_topk, kawhi, none, pepo, tor, vppo"):
        token_weights("bogus", {}, torch.ones(1, 1))


# ---------------------------------------------------------------------------------------------
# properties over random batches


@st.composite
def batches(draw):
    n = draw(st.integers(1, 5))
    t = draw(st.integers(1, 7))
    lengths = draw(st.lists(st.integers(0, t), min_size=n, max_size=n))
    seed = draw(st.integers(0, 10_000))
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).long()
    logp = -torch.rand(n, t, generator=g) * 5
    corrupt = -torch.rand(n, t, generator=g) * 5
    signals = {
        "entropy": torch.rand(n, t, generator=g) * 3,
        "visual_dependency": visual_dependency(logp, corrupt, mask),
        "visual_similarity": torch.rand(n, t, generator=g) * 2 - 1,
        "region_attention": torch.rand(n, t, generator=g) * 0.5,
        "step_ids": (torch.rand(n, t, generator=g) < 0.3).long().cumsum(1),
    }
    extra = draw(st.integers(1, 3))
    return signals, mask, extra, draw(st.floats(0.0, 1.0))


@settings(max_examples=60, deadline=None)
@given(batches())
def test_weights_nonnegative_zero_on_padding_and_invariant_to_padding_columns(data):
    signals, mask, extra, progress = data
    n = mask.shape[0]
    padded_mask = torch.cat([mask, torch.zeros(n, extra, dtype=mask.dtype)], 1)
    padded = {k: torch.cat([v, torch.full((n, extra), 99.0)], 1) for k, v in signals.items()}
    for name in METHODS.names():
        w = token_weights(name, signals, mask, progress=progress)
        assert torch.isfinite(w).all() and (w >= 0).all(), name
        assert (w[mask == 0] == 0).all(), name
        wp = token_weights(name, padded, padded_mask, progress=progress)
        assert torch.allclose(wp[:, : mask.shape[1]], w, atol=1e-5), name
        assert (wp[:, mask.shape[1]:] == 0).all(), name


@settings(max_examples=60, deadline=None)
@given(batches())
def test_weights_average_to_one_where_promised(data):
    signals, mask, _, progress = data
    valid = mask.bool()
    if not valid.any():
        return
    # tor: mean 1 over the batch's valid tokens
    assert token_weights("tor", signals, mask)[valid].mean().item() == pytest.approx(1.0, abs=1e-4)
    # kawhi: mean 1 over each response's valid tokens
    w = token_weights("kawhi", signals, mask)
    for i in range(mask.shape[0]):
        if valid[i].any():
            assert w[i][valid[i]].mean().item() == pytest.approx(1.0, abs=1e-4)
    # pepo: mean 1 over each response's valid tokens, at any progress
    w = token_weights("pepo", signals, mask, progress=progress)
    for i in range(mask.shape[0]):
        if valid[i].any():
            assert w[i][valid[i]].mean().item() == pytest.approx(1.0, abs=1e-4)
    # vppo: the sequence scales beta (each response's largest weight) average 1 over responses
    w = token_weights("vppo", signals, mask)
    beta = w.max(1).values[valid.any(1)]
    assert beta.mean().item() == pytest.approx(1.0, abs=1e-4)
    # entropy_topk: exactly the top ceil(frac * n) tokens unless there are ties
    e = token_weights("entropy_topk", signals, mask, top_frac=0.3)
    assert e.sum().item() >= math.ceil(round(0.3 * valid.sum().item(), 9))
    assert set(e.unique().tolist()) <= {0.0, 1.0}


def test_each_method_reads_its_own_settings_record_from_the_config():
    """Every method's settings are `token_weighting` keys, and non-default values reach the record."""
    import dataclasses

    from mmrlvr.algos.token_weights import METHODS
    from mmrlvr.config import TokenWeightingConfig

    for name in METHODS.names():
        m = METHODS.get(name)
        record = m.settings(TokenWeightingConfig())  # raises if a setting is not a config field
        assert dataclasses.is_dataclass(record) and dataclasses.fields(record) == dataclasses.fields(m.params)
    tw = TokenWeightingConfig(vppo_top_frac=0.25, vppo_beta_min=0.7, tor_both=3.5, kawhi_strength=0.3)
    assert dataclasses.astuple(METHODS.get("vppo").settings(tw)) == (0.25, 0.7)
    assert METHODS.get("tor").settings(tw).tor_both == 3.5 and METHODS.get("kawhi").settings(tw).kawhi_strength == 0.3
    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS.get("vppo").settings(tw).vppo_top_frac = 1.0


def test_a_setting_no_config_key_names_is_an_error_not_a_default():
    from mmrlvr.algos.token_weights import Method, _params_record
    from mmrlvr.config import TokenWeightingConfig

    def misnamed(signals, mask, vppo_topfrac: float = 0.4):
        return mask.float()

    m = Method(misnamed, (), _params_record("misnamed", misnamed))
    with pytest.raises(AttributeError, match=r"\['vppo_topfrac'\] are not fields of TokenWeightingConfig"):
        m.settings(TokenWeightingConfig())
    with pytest.raises(TypeError, match=r"\['vppo_topfrac'\]: no token weighting method has such a setting"):
        token_weights("vppo", {"visual_dependency": torch.ones(1, 3)}, torch.ones(1, 3), vppo_topfrac=0.1)


def test_the_settings_record_gives_what_keywords_give():
    from mmrlvr.algos.token_weights import METHODS
    from mmrlvr.config import TokenWeightingConfig

    dep = torch.tensor([[0.9, 0.1, 0.5, 0.3, 0.7], [0.2, 0.8, 0.4, 0.6, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    tw = TokenWeightingConfig(vppo_top_frac=0.6, vppo_beta_min=0.5)
    by_record = token_weights("vppo", {"visual_dependency": dep}, mask, METHODS.get("vppo").settings(tw))
    by_keywords = token_weights("vppo", {"visual_dependency": dep}, mask, vppo_top_frac=0.6, vppo_beta_min=0.5)
    default = token_weights("vppo", {"visual_dependency": dep}, mask)
    assert torch.equal(by_record, by_keywords) and not torch.equal(by_record, default)
