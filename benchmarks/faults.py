"""Faults a real run meets, each tried once: counts of what went wrong (all should be 0).

    python benchmarks/faults.py [--timeout 60] [--json benchmarks/results/faults.json]

Each case feeds one hostile or broken input to the part of mmrlvr that meets it in a run (a planted
checkpoint object, a processor-refused image, ten broken verifier plug-ins, a changed config on
resume, a busy run directory, a YAML alias bomb, 16-bit and 100 MP images, a variable-frame-rate
clip, malformed rows and cells, still images named .mp4, unusable references...) and classifies
the outcome:

- traceback: an exception other than the one-line error the fault should give escaped;
- hang: the case ran past `--timeout` seconds (SIGALRM);
- silent wrong result: no error, warning or failure verdict, and a wrong value (code ran, reward
  given, frame misplaced, row accepted);
- data lost: good rows dropped with the bad, the first run's files changed, an empty output.

Prints one line per case and the totals; exits 1 unless every count is 0. No model is loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
os.chdir(ROOT)
CASES: list = []


class Silent(Exception):
    """The fault went unreported and the result is wrong."""


class Lost(Exception):
    """Good data was lost or overwritten."""


def case(name: str):
    def deco(fn):
        CASES.append((name, fn))
        return fn
    return deco


def expect(exc_type, fn, *args, match: str = "", **kw):
    """`fn` must raise `exc_type` with one line containing `match`; no raise is Silent."""
    try:
        fn(*args, **kw)
    except exc_type as exc:
        if "\n" in str(exc) or match not in str(exc):
            raise AssertionError(f"unclear message: {str(exc)[:200]}") from None
        return str(exc)
    raise Silent(f"{getattr(fn, '__name__', fn)} accepted it")


# ---------------------------------------------------------------- checkpoints and run directories

def _checkpoint(d: Path):
    import torch

    from mmrlvr.train.checkpoint import save_checkpoint

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 2)

        def save_pretrained(self, out):
            from safetensors.torch import save_file
            save_file(self.state_dict(), str(out / "model.safetensors"))

    class Proc:
        def save_pretrained(self, out):
            (out / "p.json").write_text("{}")

    m = Tiny()
    return save_checkpoint(d, 1, m, Proc(), torch.optim.AdamW(m.parameters()), {"data_pos": 0})


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


for _target in ("trainer_state.pt", "optimizer_rank0.pt", "rng_rank1.pt"):
    @case(f"checkpoint: object planted in {_target}")
    def _planted(tmp, target=_target):
        import torch

        from mmrlvr.train.checkpoint import CheckpointError, safe_load

        ckpt = _checkpoint(tmp)
        marker = tmp / "ran"
        torch.save({"rng": _Planted(marker), "optimizer": _Planted(marker)}, ckpt / target)
        try:
            expect(CheckpointError, safe_load, ckpt / target, match="refused to load")
        finally:
            if marker.exists():
                raise Silent("the planted code ran")


def _saved_run(tmp: Path, *overrides) -> Path:
    from mmrlvr.config import load_config, save_config

    run = tmp / "run"
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    save_config(load_config("configs/quickstart.yaml", [f"output_dir={run}", *overrides]), run / "config.yaml")
    return run


for _change in ("task.name=grounding_tiny", "train.lr=0.5", "model.path=/elsewhere", "rewards=[{verifier: format}]"):
    @case(f"resume: changed config ({_change.split('=')[0]})")
    def _resume(tmp, change=_change):
        from mmrlvr.config import load_config
        from mmrlvr.train.run_dir import RunDirError, check_resume

        run = _saved_run(tmp)
        before = (run / "config.yaml").read_text()
        expect(RunDirError, check_resume, run, load_config("configs/quickstart.yaml", [f"output_dir={run}", change]),
               match=change.split("=")[0])
        if (run / "config.yaml").read_text() != before:
            raise Lost("the first run's config.yaml was changed")


@case("run dir: a second run while the first is alive")
def _busy(tmp):
    from mmrlvr.train.run_dir import LOCK, RunDirError, acquire_lock

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp / LOCK).write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename}))
        expect(RunDirError, acquire_lock, tmp, match=f"in use by process {other.pid}")
    finally:
        other.kill()
        other.wait()


@case("run dir: stale lock of a dead run")
def _stale(tmp):
    from mmrlvr.train.run_dir import LOCK, acquire_lock, release_lock

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp / LOCK).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename}))
    said = []
    acquire_lock(tmp, warn=said.append)
    if not said:
        raise Silent("taken over without a warning")
    release_lock(tmp)


# ---------------------------------------------------------------- config

@case("config: YAML alias bomb (9 levels x 9)")
def _bomb(tmp):
    from mmrlvr.config import ConfigError, load_config

    text = "task:\n  args:\n    a: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
        f"    {n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    (tmp / "bomb.yaml").write_text(text)
    expect(ConfigError, load_config, tmp / "bomb.yaml", match="aliases are expanded")


@case("config: min_pixels > max_pixels, max_bad_frac=NaN")
def _limits(tmp):
    from mmrlvr.config import load_config
    from mmrlvr.validate import config_errors

    errs = config_errors(load_config(None, ["model.min_pixels=9000", "model.max_pixels=100", "task.name=geometry",
                                            "task.args.max_bad_frac=.nan"]))
    if not any("min_pixels" in e for e in errs) or not any("max_bad_frac" in e for e in errs):
        raise Silent(f"accepted: {errs}")


# ---------------------------------------------------------------- images and video

def _decode_one(path) -> str:
    from mmrlvr.data.feed import decode_samples
    from mmrlvr.types import Sample

    good, bad = decode_samples([Sample("s", (), 0, images=(str(path),))])
    if good:
        raise Silent(f"{path.name} decoded")
    return bad[0][1]


@case("image: 28x8000 (aspect the processor refuses)")
def _strip(tmp):
    from PIL import Image

    Image.new("RGB", (28, 8000)).save(tmp / "strip.png")
    _decode_one(tmp / "strip.png")


@case("image: 10000x10000 (100 MP, under Pillow's own error)")
def _huge(tmp):
    from PIL import Image

    Image.new("1", (10_000, 10_000)).save(tmp / "big.png")
    _decode_one(tmp / "big.png")


@case("image: 16-bit grey (I;16)")
def _sixteen(tmp):
    from PIL import Image

    from mmrlvr.data.media import load_image

    Image.fromarray((np.arange(4096).reshape(64, 64) * 16).astype(np.uint16)).save(tmp / "g16.png")
    if np.asarray(load_image(tmp / "g16.png")).mean() > 200:
        raise Silent("blown to white")


@case("image: a directory given as an image")
def _dir_image(tmp):
    if "is a directory" not in _decode_one(tmp):
        raise AssertionError("reported as something else")


def _vfr(path: Path):
    import av

    times = [0.1 * i for i in range(10)] + [1.0 + i for i in range(10)]
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=None)
        s.width = s.height = 32
        s.pix_fmt = "yuv420p"
        s.time_base = s.codec_context.time_base = Fraction(1, 1000)
        for i, t in enumerate(times):
            f = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 10 * i, np.uint8), format="rgb24")
            f.pts, f.time_base = int(round(t * 1000)), Fraction(1, 1000)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


@case("video: variable frame rate, start=5 end=8")
def _vfr_case(tmp):
    from mmrlvr.data.media import load_video

    _vfr(tmp / "vfr.mp4")
    frames, meta = load_video(tmp / "vfr.mp4", start=5.0, end=8.0, nframes=4)
    if meta["timestamps"] != [5.0, 6.0, 7.0, 8.0] or [round(f.mean() / 10) for f in frames] != [14, 15, 16, 17]:
        raise Silent(f"frames at {meta['timestamps']}")


for _kw, _what in (({"nframes": 10**7}, "nframes=10**7"), ({"start": float("nan")}, "start=nan")):
    @case(f"video: {_what}")
    def _bad_video_args(tmp, kw=_kw):
        from mmrlvr.data.media import MediaError, load_video

        _vfr(tmp / "v.mp4")
        expect(MediaError, load_video, tmp / "v.mp4", **kw)


@case("video: a PNG renamed .mp4")
def _still(tmp):
    from PIL import Image

    from mmrlvr.data.media import MediaError, load_video

    Image.new("RGB", (16, 16)).save(tmp / "x.mp4", format="PNG")
    expect(MediaError, load_video, tmp / "x.mp4", match="still image")


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


# ---------------------------------------------------------------- runner

def _run_case(fn, conn) -> None:
    """In a forked child: run one case, send (outcome, why). A crash of the process (a decoder's
    abort) sends nothing and is counted as a traceback by the parent."""
    try:
        with tempfile.TemporaryDirectory() as d:
            fn(Path(d))
        conn.send(("ok", ""))
    except Silent as exc:
        conn.send(("silent wrong results", str(exc)[:200]))
    except Lost as exc:
        conn.send(("data lost", str(exc)[:200]))
    except BaseException as exc:  # noqa: BLE001 - counting is the point
        conn.send(("tracebacks", f"{type(exc).__name__}: {str(exc)[:160]}"))
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import multiprocessing as mp
    import warnings

    import datasets
    import torch

    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning is what the 100 MP case provokes
    logging.getLogger("mmrlvr").setLevel(logging.ERROR)  # the cases' own warnings are expected
    counts = {"inputs tried": 0, "tracebacks": 0, "hangs": 0, "silent wrong results": 0, "data lost": 0}
    rows = []
    ctx = mp.get_context("fork")  # each case in its own process: an abort or a hang is counted, not fatal
    for name, fn in CASES:
        counts["inputs tried"] += 1
        t0 = time.perf_counter()
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_run_case, args=(fn, child))
        proc.start()
        child.close()
        outcome, why = "tracebacks", "the process died"
        if parent.poll(args.timeout):
            try:
                outcome, why = parent.recv()
            except EOFError:
                outcome, why = "tracebacks", "the process died"
        elif proc.is_alive():
            outcome, why = "hangs", f"still running after {args.timeout:g} s"
        proc.kill()
        proc.join()
        if outcome == "tracebacks" and why == "the process died":
            why = f"the process died (exit code {proc.exitcode})"
        if outcome != "ok":
            counts[outcome] += 1
        rows.append({"case": name, "outcome": outcome, "seconds": round(time.perf_counter() - t0, 2), "why": why})
        print(f"{name:55s} {outcome:22s} {rows[-1]['seconds']:6.2f} s" + ("" if outcome == "ok" else f"  {why}"),
              flush=True)
    print("; ".join(f"{k}: {v}" for k, v in counts.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "cases": rows}, indent=1))
    return 0 if all(v == 0 for k, v in counts.items() if k != "inputs tried") else 1


if __name__ == "__main__":
    sys.exit(main())
