"""A broken verifier's verdicts are failures: counted, warned about by name, and `score` exits 1."""

import json
import logging
import textwrap

import pytest

from mmrlvr.types import Sample, Verdict
from mmrlvr.verifiers.base import VERIFIER_FAILED, clean_verdict, is_failure
from mmrlvr.verifiers.failures import FailureCounter, too_many
from mmrlvr.verifiers.pool import VerifierPool
from mmrlvr.verifiers.score import InProcessScorer

BROKEN = textwrap.dedent('''
    import os, sys, time

    def hang(c, s):
        while True:
            time.sleep(0.05)

    def spin(c, s):
        while True:
            pass

    def hog(c, s):
        return bytearray(1 << 45)  # 32 TiB: refused by the allocator

    def die(c, s):
        os._exit(3)

    def leave(c, s):
        sys.exit(0)

    def nan(c, s):
        return float("nan")

    def text(c, s):
        return "1.0"

    def huge(c, s):
        return 1e9

    def boom(c, s):
        raise RuntimeError("boom")

    def interrupt(c, s):
        raise KeyboardInterrupt

    def fine(c, s):
        return float(c == s.reference)
''')
NAMES = ["hang", "spin", "hog", "die", "leave", "nan", "text", "huge", "boom", "interrupt"]


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    return path


@pytest.mark.timeout(180)
def test_every_broken_plugin_gives_failures_in_the_pool(broken):
    specs = [f"{broken}:{n}" for n in NAMES] + [f"{broken}:fine"]
    s = [Sample("a", (), "x")] * 2
    warnings = []
    with VerifierPool(timeout=0.5, workers=1, grace=3.0, plugins=specs) as pool:
        pool.failures.warn = warnings.append
        for name in NAMES:
            out = pool(f"{broken}:{name}", ["x", "y"], s)
            assert all(v.score == 0.0 and is_failure(v) for v in out), (name, out)
        assert [v.score for v in pool(f"{broken}:fine", ["x", "y"], s)] == [1.0, 0.0]  # the pool still works
    # each broken verifier failed 2 of 2 items: 2 > max(1, 0.05 * 2) -> one warning each, naming it
    assert len(warnings) == len(NAMES)
    for name, msg in zip(NAMES, warnings):
        assert f"{broken}:{name}" in msg and "failed on 2 of 2 items" in msg
    assert pool.failures.total_failed() == 2 * len(NAMES)


def test_in_process_sys_exit_and_bad_results_are_failures(broken):
    specs = [f"{broken}:{n}" for n in ("leave", "nan", "text", "huge", "boom", "fine")]
    scorer = InProcessScorer(plugins=specs)
    for spec in specs[:-1]:
        assert all(is_failure(v) and v.score == 0.0 for v in scorer(spec, ["x"], [Sample("a", (), "x")]))
    assert scorer(specs[-1], ["x"], [Sample("a", (), "x")])[0].score == 1.0


def test_clean_verdict_refuses_what_is_not_a_score():
    assert clean_verdict(Verdict(0.25, "ok")) == Verdict(0.25, "ok", {})
    assert clean_verdict(1) == Verdict(1.0, "", {})
    for bad in (float("nan"), float("inf"), 1e9, -0.5, "0.5", None, True, Verdict("x"), {"score": 2}):
        v = clean_verdict(bad)
        assert v.score == 0.0 and v.reason.startswith(VERIFIER_FAILED), bad


def test_warning_only_past_a_small_share(caplog):
    # share 0.05: with 40 items 2 failures are allowed (max(1, 2.0) = 2), the 3rd warns
    assert not too_many(2, 40) and too_many(3, 40) and not too_many(1, 4) and too_many(2, 4)
    counter = FailureCounter()
    ok, bad = Verdict(1.0, "ok"), Verdict(0.0, VERIFIER_FAILED + "timed out after 5s")
    with caplog.at_level(logging.WARNING, logger="mmrlvr.verifiers"):
        counter.record("math", [ok] * 38 + [bad] * 2)
        assert not caplog.records
        counter.record("math", [bad])
        counter.record("math", [bad] * 5)  # once per verifier
    assert len(caplog.records) == 1
    assert "verifier 'math' failed on 3 of 41 items" in caplog.records[0].getMessage()
    assert "timed out after 5s" in caplog.records[0].getMessage()


@pytest.mark.parametrize("workers", ["0", "1"])
def test_score_counts_failures_and_exits_1(broken, tmp_path, capsys, workers):
    from mmrlvr.cli import main

    rows = [{"id": i, "completion": "x", "reference": "x"} for i in range(3)]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    name = "leave" if workers == "0" else "die"  # sys.exit in-process; os._exit kills a worker
    assert main(["score", str(src), "-o", str(out), "-q", "--workers", workers, "--timeout", "2",
                 "--verifier", f"{broken}:{name}"]) == 1
    err = capsys.readouterr().err
    assert "scored 3 lines (0 with a bad reference, 3 where the verifier failed), 0 bad lines" in err
    assert f"{src}:1: verifier failed:" in err
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [g["score"] for g in got] == [0.0, 0.0, 0.0] and all(g["reason"].startswith(VERIFIER_FAILED) for g in got)


def test_bad_references_are_counted_and_named_once_per_verifier():
    from mmrlvr.verifiers.base import BAD_REFERENCE

    said = []
    counter = FailureCounter(warn=said.append)
    bad = Verdict(0.0, BAD_REFERENCE + "reference [0.0, inf] is not finite")
    counter.record("tiou", [Verdict(1.0, "ok"), bad])
    counter.record("tiou", [bad, bad])
    assert counter.total_bad_references() == 3 and counter.total_failed() == 0
    assert len(said) == 1 and "verifier 'tiou': a sample has an unusable reference (bad reference: reference [0.0, inf]" in said[0]


def test_references_no_answer_can_match_are_bad_references():
    from mmrlvr.verifiers.base import BAD_REFERENCE, resolve_verifier, safe_verify

    huge = safe_verify(resolve_verifier("number"), "<answer>1</answer>", Sample("a", (), 10**400))
    assert huge.score == 0.0 and huge.reason.startswith(BAD_REFERENCE) and "too large for a float" in huge.reason
    nan = safe_verify(resolve_verifier("exact"), "<answer>nan</answer>", Sample("a", (), float("nan")))
    assert nan.score == 0.0 and nan.reason.startswith(BAD_REFERENCE)  # was "exact match", 1.0
    assert safe_verify(resolve_verifier("exact"), "<answer>nan</answer>", Sample("a", (), "nan")).score == 1.0  # the word


def test_score_blocks_are_bounded_in_bytes(tmp_path, monkeypatch):
    """Lines of 1 kB with a 3 kB bound: blocks of 3 lines (not 1,024), same output."""
    from mmrlvr.verifiers import rescore

    sizes = []
    real = rescore._score_block
    monkeypatch.setattr(rescore, "_score_block", lambda block, *a: sizes.append(len(block)) or real(block, *a))
    monkeypatch.setattr(rescore, "BLOCK_BYTES", 3000)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    pad = "x" * 1000
    src.write_text("".join(json.dumps({"verifier": "count", "completion": f"<answer>{i}</answer>{pad}", "reference": 2})
                           + "\n" for i in range(7)))
    counts = rescore.score_file(src, out, InProcessScorer(), progress=False)
    # each line is ~1,080 bytes: the 3rd line brings a block past 3,000 -> blocks 3, 3, 1
    assert sizes == [3, 3, 1] and counts.scored == 7
    assert [json.loads(x)["completion"][:18] for x in out.read_text().splitlines()] == \
        [f"<answer>{i}</answer>" for i in range(7)]  # every line, in input order


def test_a_math_verify_time_out_is_a_failure_not_a_wrong_answer(monkeypatch):
    """math-verify answers False when its own alarm fires; the time spent tells it apart. The slow
    comparison is a stand-in (sleeping the time-out), the detection and reason are the real ones."""
    import time

    import math_verify

    from mmrlvr.verifiers import symbolic

    monkeypatch.setattr(symbolic, "TIMEOUT_S", 1)
    assert symbolic.math_equal("2", "3") == (False, "'2' is not '3'")  # a quick "no" stays a wrong answer
    monkeypatch.setattr(math_verify, "verify", lambda *a, **k: time.sleep(1.0) or False)
    ok, why = symbolic.math_equal("2", "3")
    assert not ok and why == "verifier failed: math-verify timed out after 1s comparing"


def test_score_names_an_output_that_cannot_be_written(tmp_path, capsys):
    """A full disk fails at write time, where the OSError carries no file name ("None: ...")."""
    from mmrlvr.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"verifier": "count", "completion": "<answer>1</answer>", "reference": 1}) + "\n")
    assert main(["score", str(src), "-o", "/dev/full", "-q", "--workers", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["mmrlvr: error: /dev/full: No space left on device"]


def test_failed_frac_counts_only_verifier_failures():
    from mmrlvr.verifiers.failures import failed_frac

    verdicts = [Verdict(0.0, "verifier failed: timed out"), Verdict(0.0, "bad reference: NaN"),
                Verdict(1.0, "correct"), Verdict(0.0, "verifier failed: NaN"), Verdict(0.0, "wrong")]
    assert failed_frac(verdicts) == 2 / 5  # two failures; a bad reference is the data's, not counted
    assert failed_frac([]) == 0.0


def test_the_remedy_fits_the_failure_and_a_step_counts_only_its_own_items():
    from mmrlvr.verifiers.base import failed
    from mmrlvr.verifiers.failures import remedy

    assert remedy("timed out after 5s") == "make the verifier faster or raise verifier_timeout"
    assert remedy("its process did not answer in time") == "make the verifier faster or raise verifier_timeout"
    assert remedy("raised KeyError: 'level'") == "fix the KeyError the verifier raises (more time would not help)"
    counter = FailureCounter(warn=lambda msg: None)
    counter.record("exact", [failed("raised KeyError: 'x'")] * 4)  # an evaluation before the step
    counter.begin_step()
    counter.record("exact", [failed("raised KeyError: 'x'")] * 16)
    assert counter.end_step(0.5).startswith("reward 'exact' failed on all 16 items of this step")
