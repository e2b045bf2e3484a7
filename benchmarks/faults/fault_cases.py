"""The fault cases `benchmarks/faults/faults.py` runs: each feeds one hostile or broken input to the part
of mmrlvr that meets it in a run and raises `Silent` or `Lost` when the fault goes unreported or
good data is lost (any other exception counts as a traceback). `@case(name)` registers one in
`CASES`, in the order they run. Paths are relative to the repository root (the runner's cwd).
Here: checkpoints, run directories, config, images and video; `fault_cases_data.py`: data rows,
the CLI and verifiers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

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
    from mmrlvr.train.run_dir import RunDirError, acquire_lock

    code = ("import sys, time; from mmrlvr.train.run_dir import acquire_lock; acquire_lock(sys.argv[1]); "
            "print('held', flush=True); time.sleep(30)")
    other = subprocess.Popen([sys.executable, "-c", code, str(tmp)], stdout=subprocess.PIPE, text=True)
    try:
        other.stdout.readline()  # it holds the lock
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
    from mmrlvr.checks.validate import config_errors

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
