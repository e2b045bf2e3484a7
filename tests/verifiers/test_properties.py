"""Property tests: no verifier raises or leaves [0, 1]; IoU and Kendall behave as metrics."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify
from mmrlvr.verifiers.base import clean_verdict
from mmrlvr.verifiers.geometry import giou, iou, kendall_tau, segment_iou
from mmrlvr.verifiers.grounding import parse_boxes

REFS = {"count": 3, "math": "\\frac{1}{2}", "choice": "B", "number": 12.5, "iou": [10, 10, 50, 50],
        "boxes": [[10, 10, 50, 50], [60, 60, 90, 90]], "order": ["C", "A", "B"], "tiou": [2.5, 7.0], "format": None}
FRAGMENTS = st.sampled_from(["<answer>", "</answer>", "\\boxed{", "}", "{", "[", "]", ",", "(", ")", "1e308", "-0",
                             "nan", "inf", "B", "A or B", "->", "<think>", "</think>", "\\frac{", "1/0", "%", " ",
                             "<|box_start|>", "<|box_end|>", "bbox_2d", '"', ":", "9" * 40, "x =", "\\sqrt{"])
TEXT = st.one_of(st.text(max_size=300), st.lists(st.one_of(FRAGMENTS, st.text(max_size=5)), max_size=40).map("".join))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(REFS)), completion=TEXT)
def test_verifiers_never_raise_and_stay_in_unit_interval(name, completion):
    fn = resolve_verifier(name)
    sample = Sample("p", (), REFS[name], name, meta={"image_size": [100, 100]})
    raw = fn(completion, sample)  # called bare: the verifier itself must not raise
    v = clean_verdict(raw)
    assert 0.0 <= v.score <= 1.0 and v == safe_verify(fn, completion, sample)


coord = st.floats(-1000, 1000, allow_nan=False)
box = st.tuples(coord, coord, st.floats(0.01, 500), st.floats(0.01, 500)).map(lambda t: [t[0], t[1], t[0] + t[2], t[1] + t[3]])


@settings(max_examples=200, deadline=None)
@given(box, box)
def test_iou_symmetric_bounded(a, b):
    assert abs(iou(a, b) - iou(b, a)) < 1e-9
    assert 0.0 <= iou(a, b) <= 1.0 + 1e-9
    assert -1.0 - 1e-9 <= giou(a, b) <= iou(a, b) + 1e-9


@settings(max_examples=100, deadline=None)
@given(box)
def test_iou_identity_and_disjoint(a):
    assert abs(iou(a, a) - 1.0) < 1e-9
    shifted = [a[2] + 1, a[1], a[2] + 1 + (a[2] - a[0]), a[3]]
    assert iou(a, shifted) == 0.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=12, unique=True))
def test_kendall_identity_and_reversal(labels):
    assert kendall_tau(labels, labels) == 1.0
    assert kendall_tau(labels[::-1], labels) == -1.0
    order = resolve_verifier("order")
    ref = [f"e{x}" for x in labels]
    s = Sample("k", (), ref, "order")
    assert order(", ".join(ref), s).score == 1.0
    assert order(", ".join(ref[::-1]), s).score == 0.0


@settings(max_examples=100, deadline=None)
@given(st.lists(box, min_size=1, max_size=5), st.sampled_from(["json", "qwen", "plain"]))
def test_parse_boxes_roundtrip(boxes, style):
    rounded = [[round(v, 2) for v in b] for b in boxes]
    if style == "json":
        text = str(rounded)
    elif style == "qwen":
        text = " ".join(f"<|box_start|>({b[0]},{b[1]}),({b[2]},{b[3]})<|box_end|>" for b in rounded)
    else:
        text = "; ".join(f"({b[0]}, {b[1]}), ({b[2]}, {b[3]})" for b in rounded)
    assert parse_boxes(text) == rounded


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 100), st.floats(0.1, 50))
def test_segment_iou_identity(start, length):
    seg = [start, start + length]
    assert abs(segment_iou(seg, seg) - 1.0) < 1e-9
