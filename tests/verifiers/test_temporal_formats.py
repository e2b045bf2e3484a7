"""The segment formats `tiou` reads: `[s, e]`, `{"start_time": s, "end_time": e}` (numbers or
strings, the format Temporal-R1 prompts for), "from s to e seconds", "s s - e s", `<answer>s, e</answer>`;
anything else scores 0 with a reason."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify
from mmrlvr.verifiers.geometry import segment_iou
from mmrlvr.verifiers.temporal import parse_segment

FORMATS = [
    lambda s, e: f"[{s}, {e}]",
    lambda s, e: json.dumps({"start_time": str(s), "end_time": str(e)}),
    lambda s, e: json.dumps({"start_time": s, "end_time": e}),
    lambda s, e: json.dumps({"end_time": e, "start_time": s}),
    lambda s, e: f"The event happens from {s} to {e} seconds.",
    lambda s, e: f"between {s} and {e} seconds",
    lambda s, e: f"{s}s - {e}s",
    lambda s, e: f"<answer>{s}, {e}</answer>",
    lambda s, e: f"<think>the dog barks</think><answer>{json.dumps({'start_time': str(s), 'end_time': str(e)})}</answer>",
]

seconds = st.decimals(0, 10_000, places=2, allow_nan=False, allow_infinity=False).map(float)


@settings(max_examples=150, deadline=None)
@given(start=seconds, length=st.decimals("0.01", 1000, places=2).map(float), fmt=st.sampled_from(FORMATS))
def test_every_format_reads_back_the_segment_and_scores_one(start, length, fmt):
    end = round(start + length, 2)
    written = fmt(start, end)
    assert parse_segment(written) == (start, end)
    v = safe_verify(resolve_verifier("tiou"), written, Sample("t", (), [start, end], "tiou"))
    assert v.score == pytest.approx(1.0)


@pytest.mark.parametrize("written,why", [
    ('{"start_time": "2.5"}', "no single"),  # no end
    ('{"start_time": 2.5, "end_time": 7, "end_time": 8}', "no single"),  # two ends
    ('{"start_time": "soon", "end_time": "later"}', "no single"),
    ('{"start_time": 7, "end_time": 2.5}', "ends before"),
    ("somewhere in the middle", "no single"),
])
def test_anything_else_scores_zero_with_a_reason(written, why):
    v = safe_verify(resolve_verifier("tiou"), written, Sample("t", (), [2.5, 7.0], "tiou"))
    assert v.score == 0.0 and why in v.reason


PROSE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz .!?", max_size=40)
NOISE = st.lists(st.one_of(st.sampled_from(["[", "]", ",", "-", "–", " to ", " and ", "s", "sec", '"start_time"', '"end_time"',
                                            ":", '"', "{", "}", "<answer>", "</answer>", "1e308", "nan", "9" * 45, ".", "+"]),
                           st.text(max_size=4)), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=200), NOISE))
def test_the_parser_never_raises_and_reads_a_finite_pair_or_nothing(text):
    seg = parse_segment(text)
    assert seg is None or (len(seg) == 2 and all(isinstance(t, float) and t == t and abs(t) != float("inf") for t in seg))


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Nd",)), max_size=200))
def test_text_without_digits_holds_no_segment(text):
    assert parse_segment(text) is None


@settings(max_examples=150, deadline=None)
@given(start=seconds, length=st.decimals("0.01", 1000, places=2).map(float), fmt=st.sampled_from(FORMATS),
       before=PROSE, after=PROSE)
def test_digit_free_prose_around_a_segment_does_not_change_what_is_read(start, length, fmt, before, after):
    end = round(start + length, 2)
    assert parse_segment(f"{before} {fmt(start, end)} {after}") == (start, end)


@settings(max_examples=150, deadline=None)
@given(a=seconds, b=seconds, la=st.decimals("0.01", 100, places=2).map(float), lb=st.decimals("0.01", 100, places=2).map(float),
       fmt=st.sampled_from(FORMATS))
def test_two_different_segments_score_zero_never_a_silent_choice(a, b, la, lb, fmt):
    first, second = (a, round(a + la, 2)), (b, round(b + lb, 2))
    if first == second:
        return
    v = safe_verify(resolve_verifier("tiou"), f"{fmt(*first)} or {fmt(*second)}", Sample("t", (), list(first), "tiou"))
    assert v.score == 0.0 and v.reason


@settings(max_examples=150, deadline=None)
@given(start=seconds, length=st.decimals("0.01", 1000, places=2).map(float), fmt=st.sampled_from(FORMATS),
       ref_start=seconds, ref_length=st.decimals("0.01", 1000, places=2).map(float))
def test_the_score_is_the_tiou_of_what_was_read(start, length, fmt, ref_start, ref_length):
    end, ref = round(start + length, 2), [ref_start, round(ref_start + ref_length, 2)]
    v = safe_verify(resolve_verifier("tiou"), fmt(start, end), Sample("t", (), ref, "tiou"))
    assert v.score == pytest.approx(segment_iou((start, end), ref), abs=1e-9)
