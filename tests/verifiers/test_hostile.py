"""Hostile completions and files: bounded extraction and sympy guards, bad references, and
`mmrlvr score` on hostile files (Unicode line separators, non-UTF-8 bytes, directories)."""

import json
import os

import pytest

from mmrlvr.cli import main
from mmrlvr.types import Sample
from mmrlvr.verifiers import resolve_verifier, safe_verify
from mmrlvr.verifiers.base import BAD_REFERENCE
from mmrlvr.verifiers.symbolic import refuse_math
from mmrlvr.verifiers.temporal import parse_segment

# (verifier, completion, reference, meta); each scored 1.0 before the fix or raised
BAD_REFERENCES = [
    ("tiou", "[2.0, 5.0]", [float("nan"), float("nan")], {}),  # scored 1.0 for any segment
    ("tiou", "[2.0, 5.0]", [7.0, 1.0], {}),
    ("number", "<answer>42</answer>", float("inf"), {}),  # scored 1.0 for any number
    ("number", "<answer>42</answer>", "inf", {}),
    ("number", "<answer>42</answer>", 40, {"rel_tol": float("inf")}),  # scored 1.0
    ("number", "<answer>42</answer>", 40, {"rel_tol": float("nan")}),
    ("number", "<answer>42</answer>", "forty", {}),
    ("iou", "[10, 10, 50, 50]", [float("nan")] * 4, {}),
    ("iou", "[10, 10, 50, 50]", [10, 10, 50], {}),
    ("iou", "[10, 10, 50, 50]", [10, 10, 50, 50], {"threshold": float("nan")}),
    ("iou", "[10, 10, 50, 50]", [10, 10, 50, 50], {"image_size": [float("nan"), 100]}),
    ("iou", "[10, 10, 50, 50]", [10, 10, 50, 50], {"box_format": "percent"}),
    ("boxes", "[[10, 10, 50, 50]]", [[10, 10, 50, float("inf")]], {}),
    ("count", "<answer>3</answer>", "three", {}),
    ("count", "<answer>3</answer>", float("nan"), {}),
    ("choice", "<answer>B</answer>", "BB", {}),
    ("order", "A, B", ["A", "A", "B"], {}),
    ("math", "<answer>nan</answer>", "nan", {}),
    ("math", "<answer>nan</answer>", float("nan"), {}),
    ("math", "<answer>1</answer>", "9^{9^{9}}", {}),
    ("math", "<answer>1</answer>", "", {}),
]


@pytest.mark.parametrize("name,completion,ref,meta", BAD_REFERENCES, ids=[f"{r[0]}-{r[2]!r}"[:40] for r in BAD_REFERENCES])
def test_a_bad_reference_scores_zero_and_says_so(name, completion, ref, meta):
    v = safe_verify(resolve_verifier(name), completion, Sample("r", (), ref, name, meta=meta))
    assert v.score == 0.0 and v.reason.startswith(BAD_REFERENCE), v


@pytest.mark.parametrize("text,why", [
    ("9^{9^{9}}", "exponent over 1000"), ("2^{2^{2^{2^{2^{2}}}}}", "exponent over 1000"), ("x 9**9**9", "tower"),
    ("9^9^9", "tower"), ("x^{x^{x^{x}}}", "tower"), ("\\frac{1}{" * 60 + "2" + "}" * 60, "nested 60 deep"),
    ("(x+1)^{100000}", "exponent over 1000"), ("1000000!", "factorial"), ("\\binom{10^{9}}{10^{8}}", "huge range"),
    ("1" * 41, "more than 40 digits"), ("-1e999999", "out of range"), ("+".join(["x"] * 300), "operators"),
])
def test_sympy_is_never_handed_a_tower_or_a_huge_power(text, why):
    assert why in refuse_math(text)
    v = safe_verify(resolve_verifier("math"), f"<answer>{text}</answer>", Sample("m", (), "1", "math"))
    assert v.score == 0.0 and "answer refused" in v.reason


@pytest.mark.parametrize("text", ["e^{x^2}", "2^{10}", "2^{2^{3}}", "\\frac{1}{2}", "10!", "3.14e-5", "(1, 2), (3, 4)"])
def test_ordinary_answers_pass_the_guard(text):
    assert refuse_math(text) is None


def test_math_still_scores_equivalent_answers():
    math = resolve_verifier("math")
    assert math("<answer>2^{10}</answer>", Sample("m", (), "1024", "math")).score == 1.0
    assert math("<answer>e^{x^2}</answer>", Sample("m", (), "e^{x^{2}}", "math")).score == 1.0


def test_segment_pattern_is_unambiguous_on_digit_runs():
    """`\\d+\\.?\\d*` matched a digit run in O(n^2) ways (1,000 digits: 73 s); each number now has one
    parse, so a run is simply not a segment, and real segments still parse."""
    assert parse_segment("1" * 1000) is None and parse_segment("[" + "9" * 10_000) is None
    assert parse_segment("from 2.5 to 7 seconds") == (2.5, 7.0)
    assert parse_segment("2.5 s - 7.0 s") == (2.5, 7.0)


def _rows(tmp_path, rows: list, raw_tail: bytes = b"") -> "os.PathLike":
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in rows) + raw_tail)
    return src


def test_unicode_line_separators_are_data_and_a_round_trip_loses_nothing(tmp_path, capsys):
    """U+2028/U+2029/U+0085 inside strings stay in their row; line numbers are the file's."""
    rows = [
        {"id": 1, "verifier": "count", "completion": "<answer>3</answer>\u2028", "reference": 3},
        {"id": 2, "verifier": "count", "completion": "<think>a\u2029b\x85c</think><answer>2</answer>", "reference": 2},
        {"id": 3, "verifier": "tiou", "completion": "[1, 2]", "reference": [float("nan"), float("nan")]},
        {"id": 4, "verifier": "count", "completion": "<answer>5</answer>", "reference": 4},
    ]
    src = _rows(tmp_path, rows, raw_tail=b"{broken\n")
    out, again = tmp_path / "out.jsonl", tmp_path / "again.jsonl"
    assert main(["score", str(src), "-o", str(out), "-q", "--workers", "0"]) == 1
    err = capsys.readouterr().err
    assert f"{src}:5: not valid JSON" in err  # the file's line 5, not a count of split pieces
    assert f"{src}:3: {BAD_REFERENCE}tiou reference" in err
    assert "scored 4 lines (1 with a bad reference, 0 where the verifier failed), 1 bad lines" in err
    text = out.read_text(encoding="utf-8")
    assert "NaN" not in text.replace('"NaN"', "")  # strict JSON: no bare NaN
    got = [json.loads(line) for line in text.split("\n") if line]
    assert [g["id"] for g in got] == [1, 2, 3, 4] and [g["score"] for g in got] == [1.0, 1.0, 0.0, 0.0]
    assert got[1]["completion"] == rows[1]["completion"] and got[2]["reference"] == ["NaN", "NaN"]
    # the output scores again to the same rows
    assert main(["score", str(out), "-o", str(again), "-q", "--workers", "0"]) == 1
    assert [json.loads(x) for x in again.read_text(encoding="utf-8").split("\n") if x] == got


def test_non_utf8_is_an_error_naming_the_line(tmp_path, capsys):
    """Bytes that are not UTF-8 are reported, never replaced by U+FFFD and scored."""
    src = _rows(tmp_path, [{"verifier": "count", "completion": "<answer>1</answer>", "reference": 1}],
                raw_tail=b'{"verifier": "count", "completion": "<answer>1\xff</answer>", "reference": 1}\n')
    out = tmp_path / "out.jsonl"
    assert main(["score", str(src), "-o", str(out), "-q", "--workers", "0"]) == 1
    assert f"{src}:2: not UTF-8 (byte 0xff at byte 47 of the line)" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1 and "\ufffd" not in out.read_text()


@pytest.mark.parametrize("case", ["input_dir", "output_dir", "same_file", "missing", "unwritable"])
def test_path_problems_are_one_line(case, tmp_path, capsys):
    """A directory, a missing file or an unwritable output is one line, exit 2."""
    src = _rows(tmp_path, [{"verifier": "count", "completion": "<answer>1</answer>", "reference": 1}])
    out = tmp_path / "out.jsonl"
    if case == "input_dir":
        src = tmp_path
    elif case == "output_dir":
        out = tmp_path
    elif case == "same_file":
        out = src
    elif case == "missing":
        src = tmp_path / "nope.jsonl"
    else:
        if os.geteuid() == 0:
            pytest.skip("root can write anywhere")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out = locked / "out.jsonl"
    before = src.read_bytes() if src.is_file() else None
    assert main(["score", str(src), "-o", str(out), "-q", "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: "), err
    if before is not None:
        assert src.read_bytes() == before  # the input is never truncated


def test_bad_score_flags_are_one_line(tmp_path, capsys):
    src = _rows(tmp_path, [{"verifier": "count", "completion": "x", "reference": 1}])
    for flag in (["--timeout", "-1"], ["--timeout", "nan"], ["--workers", "-2"]):
        assert main(["score", str(src), "-o", str(tmp_path / "o.jsonl"), "-q", *flag]) == 2
        assert capsys.readouterr().err.startswith(f"mmrlvr: error: {flag[0]}=")


def test_long_tuples_and_lists_parse_and_score():
    """A 24-tuple and six 4-tuples are answers (a cap of 20 commas refused them): the guards bound
    what parsing costs (length, nesting, powers, time), not how many items an answer has."""
    math = resolve_verifier("math")
    tup = "(" + ", ".join(str(i) for i in range(24)) + ")"
    assert safe_verify(math, f"<answer>{tup}</answer>", Sample("m", (), tup.replace(" ", ""), "math")).score == 1.0
    quads = [f"({i}, {i + 1}, {i + 2}, {i + 3})" for i in range(6)]
    ref = ", ".join(reversed(quads))
    assert safe_verify(math, f"\\boxed{{{', '.join(quads)}}}", Sample("m", (), ref, "math")).score == 1.0


def test_the_costliest_list_within_the_length_bound_ends_in_bounded_time(monkeypatch):
    """About 140 symbolic pairs fill the 1,000 characters and take the LaTeX parser about 2.5 s here:
    math-verify's time-out ends the parse (a verifier failure, not a wrong answer; 1 s in this test);
    10 MB of list is refused at once."""
    import time

    from mmrlvr.verifiers import symbolic

    monkeypatch.setattr(symbolic, "TIMEOUT_S", 1)
    math = resolve_verifier("math")
    math.warmup()  # imports and parser caches are not the answer's cost
    pairs = ",".join(f"(a_{{{i}}},b)" for i in range(200))[: symbolic.MAX_MATH_CHARS - 2].rsplit(",", 1)[0]
    t0 = time.monotonic()
    v = safe_verify(math, f"<answer>{pairs}</answer>", Sample("m", (), "1", "math"))
    assert v.score == 0.0 and time.monotonic() - t0 < 1.8, v
    t0 = time.monotonic()
    v = safe_verify(math, "<answer>" + "1," * 5_000_000 + "1</answer>", Sample("m", (), "1", "math"))
    assert v.score == 0.0 and time.monotonic() - t0 < 1
