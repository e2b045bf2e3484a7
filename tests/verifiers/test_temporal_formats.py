"""The segment formats `tiou` reads: `[s, e]`, `{"start_time": s, "end_time": e}` (numbers or
strings, the format Temporal-R1 prompts for), "from s to e seconds", "s s - e s", `<answer>s, e</answer>`;
anything else scores 0 with a reason."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify
from mmrlvr.verifiers.temporal import parse_segment

FORMATS = [
    lambda s, e: f"[{s}, {e}]",
    lambda s, e: json.dumps({"start_time": str(s), "end_time": str(e)}),
    lambda s, e: json.dumps({"start_time": s, "end_time": e}),
    lambda s, e: json.dumps({"end_time": e, "start_time": s}),
    lambda s, e: f"The event happens from {s} to {e} seconds.",
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
