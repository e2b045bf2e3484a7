"""Fault cases on data rows, the CLI and verifiers (the second half of `benchmarks/faults/faults.py`'s
list; registered after those of `fault_cases.py`, into the same `CASES`)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

from benchmarks.faults.fault_cases import Lost, Silent, case, expect

# ---------------------------------------------------------------- rows

def _rows(tmp: Path, rows: list, **args):
    from PIL import Image

    from mmrlvr.tasks import load_task

    Image.new("RGB", (28, 28)).save(tmp / "a.png")
    lines = [r if isinstance(r, bytes) else json.dumps({"image": "a.png", **r}).encode() for r in rows]
    (tmp / "d.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return load_task("geometry", "train", 100, 0, data=str(tmp / "d.jsonl"), holdout_frac=0.0,
                     cache_dir=str(tmp / "c"), **{"max_bad_frac": 0.5, **args})


GOOD = {"question": "<image>x?", "answer": "A", "options": ["1", "2"]}
for _bad, _what in (({**GOOD, "options": "ABCD"}, "options as a string"), ({**GOOD, "options": 5}, "options: 5"),
                    ({**GOOD, "answer": None}, "answer null"),
                    (b'{"image": "a.png", "question": "<image>caf\xe9?", "answer": "A"}', "a Latin-1 byte")):
    @case(f"rows: {_what}")
    def _bad_row(tmp, bad=_bad):
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logger = logging.getLogger("mmrlvr.data")
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        try:
            got = _rows(tmp, [GOOD, bad, GOOD])
        finally:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
        if len(got) != 2:
            raise (Silent if len(got) == 3 else Lost)(f"{len(got)} samples from 2 good rows and 1 bad")
        if not any("row 1 skipped" in r.getMessage() for r in records):
            raise Silent("no 'row 1 skipped' line")


@case("rows: every row bad with max_bad_frac=1")
def _all_bad(tmp):
    from mmrlvr.data.io import DataError

    expect(DataError, _rows, tmp, [{**GOOD, "options": 5}] * 3, max_bad_frac=1.0, match="all 3 rows are bad")


@case("rows: empty JSONL")
def _empty(tmp):
    from mmrlvr.data.io import DataError, open_dataset

    (tmp / "e.jsonl").write_text("\n")
    expect(DataError, open_dataset, str(tmp / "e.jsonl"), match="empty file")


@case("rows: columns {image: 5}")
def _columns(tmp):
    from mmrlvr.data.io import DataError

    expect(DataError, _rows, tmp, [GOOD], columns={"image": 5}, match="task.args.columns.image")


@case("rows: an unterminated CSV quote")
def _csv_quote(tmp):
    from mmrlvr.data.io import DataError, open_dataset

    (tmp / "q.csv").write_text('question,answer\n"what is 1+1,2\nwhat is 2+2,4\n')
    expect(DataError, open_dataset, str(tmp / "q.csv"), match="line 2: a quote opened here never closes")


@case("rows: a temporal segment [0, Infinity]")
def _infinite_segment(tmp):
    from mmrlvr.data.io import DataError
    from mmrlvr.tasks import load_task

    (tmp / "g.jsonl").write_text('{"video": "a.mp4", "query": "it ends", "timestamp": [0, Infinity]}\n')
    expect(DataError, load_task, "temporal_grounding", "train", 10, 0, annotations=str(tmp / "g.jsonl"),
           match="timestamp must be finite")


def _skips_row_1(build) -> None:
    """`build()` must keep rows 0 and 2 and name row 1 in a 'row 1 skipped: field' line."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("mmrlvr.data")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        got = build()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    if len(got) != 2:
        raise (Silent if len(got) == 3 else Lost)(f"{len(got)} samples from 2 good rows and 1 bad")
    if not any("row 1 skipped: field" in r.getMessage() for r in records):
        raise Silent("no 'row 1 skipped: field ...' line")


@case("rows: a temporal segment ending after its clip")
def _late_segment(tmp):
    import av
    import numpy as np

    from mmrlvr.tasks import load_task

    with av.open(str(tmp / "a.mp4"), "w") as c:  # 20 frames at 10 fps: 2 s
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        for i in range(20):
            for p in s.encode(av.VideoFrame.from_ndarray(np.full((32, 32, 3), 10 * i, np.uint8), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    rows = [[0, 1.5], [1, 5], [0.5, 2]]  # row 1 ends 3 s after the clip
    (tmp / "g.jsonl").write_text("".join(json.dumps({"video": "a.mp4", "query": "q", "timestamp": t}) + "\n" for t in rows))
    _skips_row_1(lambda: load_task("temporal_grounding", "train", 10, 0, data=str(tmp / "g.jsonl"),
                                   holdout_frac=0.0, max_bad_frac=0.5))


@case("rows: a referring-expression box outside its image")
def _outside_box(tmp):
    from PIL import Image

    from mmrlvr.tasks import load_task

    Image.new("RGB", (60, 40)).save(tmp / "a.png")
    boxes = [[5, 5, 50, 30], [5, 5, 50, 90], [0, 0, 60, 40]]  # row 1: y2 90 > height 40
    (tmp / "r.jsonl").write_text("".join(json.dumps({"image": "a.png", "question": "q", "answer": b}) + "\n" for b in boxes))
    _skips_row_1(lambda: load_task("grounding", "train", 10, 0, data=str(tmp / "r.jsonl"), holdout_frac=0.0,
                                   max_bad_frac=0.5, cache_dir=str(tmp / "c")))


@case("cli: a data error in train is one line")
def _cli(tmp):
    from mmrlvr.cli import main

    (tmp / "e.jsonl").write_text("\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["train", "/dev/null", "task.name=geometry", f"task.args.data={tmp / 'e.jsonl'}", f"output_dir={tmp / 'r'}"])
    if rc != 2 or len(err.getvalue().strip().splitlines()) != 1:
        raise AssertionError(f"rc {rc}: {err.getvalue()[:200]}")


# ---------------------------------------------------------------- verifiers

BROKEN = """
import os, sys, time
def hang(c, s):
    while True: time.sleep(0.05)
def spin(c, s):
    while True: pass
def hog(c, s): return bytearray(1 << 45)
def die(c, s): os._exit(3)
def leave(c, s): sys.exit(0)
def nan(c, s): return float("nan")
def text(c, s): return "1.0"
def huge(c, s): return 1e9
def boom(c, s): raise RuntimeError("boom")
def interrupt(c, s): raise KeyboardInterrupt
"""
PLUGINS = ("hang", "spin", "hog", "die", "leave", "nan", "text", "huge", "boom", "interrupt")


@case("verifiers: 10 broken plug-ins in the pool")
def _plugins(tmp):
    from mmrlvr.types import Sample
    from mmrlvr.verifiers.base import is_failure
    from mmrlvr.verifiers.pool import VerifierPool

    (tmp / "broken.py").write_text(BROKEN)
    specs = [f"{tmp / 'broken.py'}:{n}" for n in PLUGINS]
    said = []
    with VerifierPool(timeout=0.5, workers=1, grace=3.0, plugins=specs) as pool:
        pool.failures.warn = said.append
        for spec in specs:
            out = pool(spec, ["x", "y"], [Sample("a", (), "x")] * 2)
            if not all(is_failure(v) and v.score == 0.0 for v in out):
                raise Silent(f"{spec}: {out}")
    if len(said) != len(specs):
        raise Silent(f"{len(said)} warnings for {len(specs)} broken verifiers")


@case("verifiers: sys.exit in-process through mmrlvr score")
def _score_exit(tmp):
    from mmrlvr.cli import main

    (tmp / "broken.py").write_text(BROKEN)
    (tmp / "in.jsonl").write_text(json.dumps({"completion": "x", "reference": "x"}) + "\n")
    with contextlib.redirect_stderr(io.StringIO()):
        rc = main(["score", str(tmp / "in.jsonl"), "-o", str(tmp / "out.jsonl"), "-q", "--workers", "0",
                   "--verifier", f"{tmp / 'broken.py'}:leave"])
    if not (tmp / "out.jsonl").read_text().strip():
        raise Lost("empty output")
    if rc != 1:
        raise Silent(f"rc {rc}")


for _verifier, _ref, _what in (("number", 10**400, "10**400"), ("exact", float("nan"), "NaN")):
    @case(f"verifiers: {_verifier} reference {_what}")
    def _bad_ref(tmp, verifier=_verifier, ref=_ref):
        from mmrlvr.types import Sample
        from mmrlvr.verifiers.base import BAD_REFERENCE, resolve_verifier, safe_verify

        v = safe_verify(resolve_verifier(verifier), "<answer>nan</answer>", Sample("a", (), ref))
        if not v.reason.startswith(BAD_REFERENCE) or v.score != 0.0:
            raise Silent(f"{v}")
