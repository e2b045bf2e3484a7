"""A reference with several answers needs all of them, in any order; several boxes are one answer
set only when the reference has several parts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify

TWO_ROOTS = "p = -1 \\text{ and } p = \\dfrac{15}{8}"


def ours(completion: str, ref: str):
    return safe_verify(resolve_verifier("math"), completion, Sample("m", (), ref, "math"))


@pytest.mark.parametrize("completion", ["<answer>-1</answer>", "<answer>p = -1</answer>", "\\boxed{-1}",
                                        "<answer>\\frac{15}{8}</answer>", "<answer>-1, \\frac{15}{8}, 2</answer>"])
def test_one_root_of_two_or_an_extra_root_scores_zero(completion):
    """One root of two was paid in full: "p =" was stripped and \\text{and} became \\mathrm, so
    the reference read as -1 alone."""
    assert ours(completion, TWO_ROOTS).score == 0.0


@pytest.mark.parametrize("completion", ["<answer>-1, \\frac{15}{8}</answer>", "<answer>\\frac{15}{8}, -1</answer>",
                                        "<answer>p=\\frac{15}{8}, p=-1</answer>", "<answer>-1 \\text{ or } \\frac{15}{8}</answer>",
                                        "\\boxed{-1} and \\boxed{\\frac{15}{8}}"])
def test_every_root_in_any_order_scores_one(completion):
    assert ours(completion, TWO_ROOTS).score == 1.0


def test_several_boxes_are_an_answer_set_only_for_a_reference_of_several_parts():
    assert ours("\\boxed{(2, 2)} \\text{ and } \\boxed{(6, 2)}", "(2, 2), (6, 2)").score == 1.0
    assert ours("<answer>\\boxed{(6, 2)}, \\boxed{(2, 2)}</answer>", "(2, 2), (6, 2)").score == 1.0
    assert ours("\\boxed{(2, 2)}", "(2, 2), (6, 2)").score == 0.0
    hedge = ours("\\boxed{3} or \\boxed{4}", "3")
    assert hedge.score == 0.0 and hedge.reason.startswith("hedged")
    # two different answer tags stay a hedge whatever the reference
    assert ours("<answer>\\boxed{3}</answer><answer>\\boxed{4}</answer>", "3, 4").score == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=2, max_size=5, unique=True), st.randoms(use_true_random=False), st.booleans())
def test_a_permutation_scores_one_and_a_proper_subset_zero(parts, rnd, boxed):
    ref = ", ".join(map(str, parts))
    shuffled = list(parts)
    rnd.shuffle(shuffled)
    write = (lambda xs: " and ".join(f"\\boxed{{{x}}}" for x in xs)) if boxed else (lambda xs: f"<answer>{', '.join(map(str, xs))}</answer>")
    assert ours(write(shuffled), ref).score == 1.0
    assert ours(write(shuffled[: rnd.randint(1, len(parts) - 1)]), ref).score == 0.0
