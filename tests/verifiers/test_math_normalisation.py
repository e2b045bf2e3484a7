"""Each rewrite the `math` verifier makes before math-verify, with a case math-verify alone gets
wrong, and the rewrites it no longer makes, with a case they broke that math-verify alone gets right.

`alone` is math-verify as its README calls it: `verify(parse(gold), parse(answer))`, both in `$...$`.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from math_verify import parse, verify

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify


def alone(answer: str, ref: str) -> bool:
    return bool(verify(parse(f"${ref}$"), parse(f"${answer}$")))


def ours(answer: str, ref: str) -> float:
    return safe_verify(resolve_verifier("math"), f"<answer>{answer}</answer>", Sample("m", (), ref, "math")).score


# (answer, reference): math-verify alone says no, a reader says yes; the rewrite that fixes it
KEPT = [
    ("32\\,349", "32349"),  # a thin space between digit groups: math-verify reads 32 + 349
    ("1\\,000\\,000", "1000000"),
    ("\\frac{2}{3}.", "\\frac{2}{3}"),  # a full stop after the answer: no parse
    ("5 m^2", "5"),  # a squared unit: math-verify reads 5*m**2 (plain units it drops itself)
    ("4 mm^{2}", "4"),
]


@pytest.mark.parametrize("answer,ref", KEPT)
def test_each_kept_rewrite_fixes_a_case_math_verify_alone_gets_wrong(answer, ref):
    assert not alone(answer, ref)
    assert ours(answer, ref) == 1.0


# (answer, reference): math-verify alone says yes; a rewrite we used to make said no
NOT_BROKEN = [
    ("19, 46, \\text{ and } 82", "19, 46, 82"),  # \text -> \mathrm broke the list
    ("32,\\! 349", "32349"),  # dropping \! but keeping the space made a two-element set
    ("32{,}349", "32349"),
    ("11,\\! 111,\\! 111,\\! 100", "11111111100"),
    ("y=-\\frac{1}{2}x+\\frac{3}{4}", "2x+4y-3=0"),  # stripping "y =" lost the equation
    ("45^\\circ", "45"),
    ("3 \\text{ cm}", "3"),
    ("50\\%", "0.5"),
    ("x = 7", "7"),
]


@pytest.mark.parametrize("answer,ref", NOT_BROKEN)
def test_no_rewrite_breaks_a_case_math_verify_alone_gets_right(answer, ref):
    assert alone(answer, ref)
    assert ours(answer, ref) == 1.0


def test_formulas_in_prose_are_read_by_math_verify_extraction():
    """A text with its own delimiters goes to math-verify's extraction as it is (it was wrapped in
    one more `$...$`, which hid the formula); one whose formula cannot be read is not read around."""
    assert ours("Therefore $x \\geq 5$ is the solution.", "x \\geq 5") == 1.0
    assert ours("The identity matrix is $ \\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix} $.",
                "\\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix}") == 1.0
    assert ours("$1,000.99", "1000.99") == 1.0  # a dollar sign, not a delimiter
    assert ours("Answer $ \n 9 \n $", "9") == 0.0


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1000, 10**12), sep=st.sampled_from([",", "{,}", "\\,", ",\\!", ",\\! "]), stop=st.booleans())
def test_thousands_separators_and_a_full_stop_read_as_the_number(n, sep, stop):
    written = f"{n:,}".replace(",", sep) + ("." if stop else "")
    assert ours(written, str(n)) == 1.0
    assert ours(written, str(n + 1)) == 0.0



def _thousands(p: int, q: int) -> tuple[str, str]:
    n = abs(p) * 1000 + q
    return f"{n // 1000},\\! {n % 1000:03d}", str(n)


# (answer as a model writes it, reference) from two integers p, q (q > 0)
FORMS = [
    lambda p, q: (f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{p}}}{{{q}}}"),
    lambda p, q: (f"{p}/{q}", f"\\frac{{{p}}}{{{q}}}"),
    lambda p, q: (f"\\dfrac{{{p}}}{{{q}}}.", f"\\frac{{{p}}}{{{q}}}"),
    lambda p, q: (f"x = \\frac{{{p}}}{{{q}}}", f"\\frac{{{p}}}{{{q}}}"),
    lambda p, q: (f"{p}/{q} \\text{{ cm}}", f"\\frac{{{p}}}{{{q}}}"),
    lambda p, q: (f"So $x = \\frac{{{p}}}{{{q}}}$.", f"\\frac{{{p}}}{{{q}}}"),
    lambda p, q: (f"{p}, \\text{{ and }} {q}", f"{p}, {q}"),
    lambda p, q: (f"{q} \\text{{ or }} {p}", f"{p}, {q}"),
    lambda p, q: (f"y = {p}x + {q}", f"{p}x - y + {q} = 0"),
    _thousands,
]


@settings(max_examples=120, deadline=None)
@given(p=st.integers(-99, 99), q=st.integers(1, 99), form=st.sampled_from(FORMS))
def test_never_worse_than_math_verify_alone(p, q, form):
    """Whatever math-verify alone accepts, `math` accepts, and `math` pays nothing for a wrong value
    (the reference written the plain way, the answer in a form a model writes)."""
    answer, ref = form(p, q)
    if alone(answer, ref):
        assert ours(answer, ref) == 1.0
    assert ours(answer, "1000001") == 0.0
