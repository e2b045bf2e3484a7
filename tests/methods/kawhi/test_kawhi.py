"""KAWHI's pure parts against hand-computed values: vision heads, the salient region (geometric
over layers), region attention, step segmentation, the weighted harmonic step weights."""

import pytest
import torch

from mmrlvr.algos.token_weights import METHODS, token_weights
from mmrlvr.methods.kawhi.regions import head_map, region_attention, salient_region, vision_heads
from mmrlvr.methods.kawhi.steps import segment_steps, step_weights

# one row, 3 heads, 2 completion positions, 5 key positions of which 1, 2, 3 are visual
VISUAL = torch.tensor([[0, 1, 1, 1, 0]])
ATTN = torch.tensor([[
    [[0.5, 0.5, 0.0, 0.0, 0.0], [0.4, 0.0, 0.6, 0.0, 0.0]],  # visual mass 0.5, 0.6
    [[0.1, 0.1, 0.1, 0.7, 0.0], [0.0, 0.2, 0.2, 0.2, 0.4]],  # 0.9, 0.6
    [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]],  # 0, 0
]])


def test_vision_heads_rank_heads_by_visual_mass_over_valid_tokens():
    both = torch.ones(1, 2)
    assert vision_heads(ATTN, VISUAL, both, 2).tolist() == [[True, True, False]]  # means 0.55, 0.75, 0
    assert vision_heads(ATTN, VISUAL, both, 1).tolist() == [[False, True, False]]
    assert vision_heads(ATTN, VISUAL, both, 9).tolist() == [[True, True, True]]  # k capped at the heads
    # only the first token valid: head 0 (0.5) still beats head 2 (0); a tie goes to the lower head
    flat = torch.full((1, 3, 2, 5), 0.2)
    assert vision_heads(flat, VISUAL, both, 1).tolist() == [[True, False, False]]
    # head 0's mass is (0.2, 1.0) -> 0.6, head 1's (0.5, 0.0) -> 0.25; with the second token
    # padding, only the first counts and head 1 (0.5 > 0.2) wins
    a = torch.zeros(1, 2, 2, 5)
    a[0, 0, 0, 1], a[0, 0, 1, 2], a[0, 1, 0, 3] = 0.2, 1.0, 0.5
    assert vision_heads(a, VISUAL, both, 1).tolist() == [[True, False]]
    assert vision_heads(a, VISUAL, torch.tensor([[1.0, 0.0]]), 1).tolist() == [[False, True]]


def test_head_map_averages_the_chosen_heads_on_visual_positions():
    m = head_map(ATTN, VISUAL, torch.ones(1, 2), 2)
    want = torch.tensor([[[0.0, 0.3, 0.05, 0.35, 0.0], [0.0, 0.1, 0.4, 0.1, 0.0]]])
    assert torch.allclose(m, want)


def test_region_and_its_attention_by_hand_with_ties_and_padding():
    both = torch.ones(1, 2)
    m = head_map(ATTN, VISUAL, both, 2)
    # saliency 0.2, 0.225, 0.225: one third of 3 visual tokens is 1, the tie goes to position 2
    assert salient_region([m], VISUAL, both, 1 / 3).tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0]]
    assert salient_region([m], VISUAL, both, 0.5).tolist() == [[0.0, 0.0, 1.0, 1.0, 0.0]]  # ceil(1.5) = 2
    assert torch.allclose(region_attention([m], VISUAL, both, 1 / 3), torch.tensor([[0.05, 0.4]]))
    # the second token is padding: heads, saliency (0.3, 0.05, 0.35) and output read only the first
    first = torch.tensor([[1.0, 0.0]])
    m1 = head_map(ATTN, VISUAL, first, 2)
    assert torch.allclose(region_attention([m1], VISUAL, first, 1 / 3), torch.tensor([[0.35, 0.0]]))


def test_saliency_is_geometric_over_layers():
    """Layer A's saliency (0.9, 0.3, 0.3), layer B's (0.01, 0.3, 0.2): the arithmetic mean would
    pick position 1 (0.455), the geometric one picks position 2 (0.3 against 0.095 and 0.245)."""
    a = torch.tensor([[[0.0, 0.9, 0.3, 0.3, 0.0]]])
    b = torch.tensor([[[0.0, 0.01, 0.3, 0.2, 0.0]]])
    one = torch.ones(1, 1)
    assert salient_region([a, b], VISUAL, one, 1 / 3).tolist() == [[0.0, 0.0, 1.0, 0.0, 0.0]]
    assert torch.allclose(region_attention([a, b], VISUAL, one, 1 / 3), torch.tensor([[0.3]]))
    assert salient_region([a, b], torch.zeros(1, 5), one, 0.5).sum() == 0  # no image: no region


def test_bf16_attention_gives_the_float32_result_of_the_same_values():
    low = ATTN.to(torch.bfloat16)
    both = torch.ones(1, 2)
    got = region_attention([head_map(low, VISUAL, both, 2)], VISUAL, both, 0.5)
    want = region_attention([head_map(low.float(), VISUAL, both, 2)], VISUAL, both, 0.5)
    assert got.dtype == torch.float32 and torch.equal(got, want)


@pytest.mark.parametrize("split, want", [
    ("paragraph", [0, 0, 0, 0, 0, 0, 0, 1, 1, 2]),
    ("line", [0, 0, 0, 0, 1, 1, 1, 2, 2, 3]),
    ("sentence", [0, 0, 0, 1, 2, 2, 2, 3, 3, 5]),
])
def test_segment_steps_by_hand(split, want):
    """A token takes the step of its first non-space character (" 2! x" is in step 3 although x
    starts step 4 of the sentence split); the whitespace-only "\n" ends its step."""
    texts = ["Row", " 1", ".", " Red\n", "blue", ".\n", "\n", "So", " 2! x\n\n", "Done"]
    assert segment_steps(texts, split) == want


def test_segment_steps_edge_cases():
    assert segment_steps([], "line") == []
    assert segment_steps(["\n\n", "A"], "paragraph") == [0, 0]  # leading blank lines start no step
    assert segment_steps(["a.", "\n\nB"], "paragraph") == [0, 1]  # a token starting after the break
    assert segment_steps(["a.", "b"], "sentence") == [0, 0]  # no space after the full stop: 3.5
    with pytest.raises(ValueError, match="kawhi_split 'word'"):
        segment_steps(["a"], "word")


def _hand_batch():
    """Row 0: steps (0, 0, 1, 1), alignment relative (4/3, 4/3, 2/3, 2/3), entropy relative
    (2/3, 2/3, 4/3, 4/3). Row 1: 3 valid tokens in 3 steps, alignment (0, 1, 2) relative,
    entropy flat, one padding token holding garbage. Row 2: padding only. Row 3: no region
    attention at all (alignment neutral), entropy relative (1/2, 3/2)."""
    align = torch.tensor([[0.3, 0.1, 0.1, 0.1], [0.0, 0.2, 0.4, 9.0], [5.0, 5.0, 5.0, 5.0], [0.0, 0.0, 0.0, 0.0]])
    ent = torch.tensor([[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 9.0], [5.0, 5.0, 5.0, 5.0], [1.0, 3.0, 0.0, 0.0]])
    steps = torch.tensor([[0, 0, 1, 1], [0, 1, 2, 0], [0, 0, 0, 0], [0, 1, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    return align, ent, steps, mask


def test_step_weights_by_hand_harmonic_and_token_mean_one():
    align, ent, steps, mask = _hand_batch()
    w = step_weights(align, ent, steps, mask, align_weight=0.75, strength=1.0)
    # row 0: H0 = 1 / (0.75 * 3/4 + 0.25 * 3/2) = 16/15, H1 = 1 / (0.75 * 3/2 + 0.25 * 3/4) = 16/21,
    # scaled to mean 1: (7/6, 7/6, 5/6, 5/6)
    assert torch.allclose(w[0], torch.tensor([7 / 6, 7 / 6, 5 / 6, 5 / 6]))
    # row 1: H = (~0, 1, 1 / (0.375 + 0.25) = 1.6), 3 tokens summing to 3
    assert torch.allclose(w[1], torch.tensor([0.0, 15 / 13, 24 / 13, 0.0]), atol=1e-5)
    assert w[1, 0] > 0  # the floor keeps it positive, not NaN
    assert torch.equal(w[2], torch.zeros(4))
    # row 3: alignment 1 everywhere; H = 1 / (0.75 + 0.25 / d) for d = 1/2, 3/2: 4/5, 12/11
    h = torch.tensor([4 / 5, 12 / 11])
    assert torch.allclose(w[3], torch.cat([h * 2 / h.sum(), torch.zeros(2)]))
    assert torch.allclose(w.sum(1), mask.sum(1).float())


def test_strength_mixes_with_one_and_align_weight_picks_the_scores():
    align, ent, steps, mask = _hand_batch()
    w = step_weights(align, ent, steps, mask, align_weight=0.75, strength=0.5)
    # row 0: W = 1/2 + 8/15 = 31/30 and 1/2 + 8/21 = 37/42, scaled by 70/67
    assert torch.allclose(w[0], torch.tensor([217, 217, 185, 185]) / 201)
    assert torch.equal(step_weights(align, ent, steps, mask, 0.75, 0.0), mask.float())
    # align_weight 1: the relative alignment alone (4/3, 2/3 -> mean 1 already)
    only = step_weights(align, ent, steps, mask, 1.0, 1.0)
    assert torch.allclose(only[0], torch.tensor([4 / 3, 4 / 3, 2 / 3, 2 / 3]))
    only = step_weights(align, ent, steps, mask, 0.0, 1.0)
    assert torch.allclose(only[0], torch.tensor([2 / 3, 2 / 3, 4 / 3, 4 / 3]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_registered_method_reads_its_signals_in_either_dtype(dtype):
    align, ent, steps, mask = _hand_batch()
    assert METHODS.get("kawhi").needs == ("entropy", "region_attention", "step_ids")
    sig = {"region_attention": align.to(dtype), "entropy": ent.to(dtype), "step_ids": steps}
    w = token_weights("kawhi", sig, mask, kawhi_align_weight=0.75, kawhi_strength=1.0, top_frac=0.3)
    assert w.dtype == torch.float32
    # every value of the hand batch is exact in bf16 except 0.3 and 0.1: compare with the rounded ones
    want = step_weights(align.to(dtype).float(), ent.to(dtype).float(), steps, mask, 0.75, 1.0)
    assert torch.allclose(w, want, atol=1e-6)
    assert torch.allclose(w.sum(1), mask.sum(1).float(), atol=1e-5)
    with pytest.raises(ValueError, match="kawhi_align_weight"):
        token_weights("kawhi", sig, mask, kawhi_align_weight=1.5)
