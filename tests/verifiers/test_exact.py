"""`exact`: table of hand-checked cases plus properties (never raises, scores 0 or 1)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.types import Sample
from mmrlvr.verifiers.base import resolve_verifier, safe_verify
from mmrlvr.verifiers.exact import exact, normalize_text


def _s(ref, **meta):
    return Sample("x", (), ref, verifier="exact", meta=meta)


@pytest.mark.parametrize("completion, ref, score", [
    ("<answer>Yes</answer>", "yes", 1.0),              # case folded
    ("<answer> yes. </answer>", "Yes", 1.0),            # trailing punctuation, spaces
    ("<answer>United  Kingdom</answer>", "united kingdom", 1.0),  # whitespace collapsed
    ("<answer>$\\text{Blue}$</answer>", "blue", 1.0),   # $ and \text{} unwrapped
    ("<answer>1,000</answer>", "1000", 1.0),            # thousands comma removed
    ("<answer>3.5</answer>", "35", 0.0),                # a decimal point is kept
    ("<answer>3.5</answer>", "3.5", 1.0),
    ("<answer>the UK</answer>", "UK", 0.0),             # articles are not dropped
    ("<answer>no</answer>", "yes", 0.0),
    ("<answer>B</answer><answer>C</answer>", "B", 0.0),  # hedged
    ("Paris", "paris", 1.0),                           # a bare answer is the answer
    ("<answer>Rome</answer>", ["Paris", "rome"], 1.0),  # any of a list
    ("<answer></answer>", "", 0.0),                    # nothing matches an empty answer
    ("<answer>Café</answer>", "café", 1.0),            # NFKC + casefold
])
def test_exact_table(completion, ref, score):
    assert exact(completion, _s(ref)).score == score


def test_case_sensitive_option():
    assert exact("<answer>Yes</answer>", _s("yes", case_sensitive=True)).score == 0.0
    assert exact("<answer>Yes</answer>", _s("Yes", case_sensitive=True)).score == 1.0


def test_registered():
    assert resolve_verifier("exact") is exact


def test_normalize_examples():
    assert normalize_text("  Hello,  World!! ") == "hello world"
    assert normalize_text("12,345.50%") == "12345.50"
    assert normalize_text("e.g. x") == "e g x"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.text(max_size=50))
def test_never_raises_and_is_binary(completion, ref):
    v = safe_verify(exact, completion, _s(ref))
    assert v.score in (0.0, 1.0) and not v.reason.startswith("verifier raised")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=100))
def test_normalize_is_idempotent_and_self_matches(text):
    once = normalize_text(text)
    assert normalize_text(once) == once
    if once:
        assert exact(f"<answer>{text}</answer>", _s(text)).score == 1.0 or "<" in text or ">" in text
