"""Memory and start-up time of a large Parquet task with embedded images.

Writes a Geometry3K-style Parquet file (`images`: a list with one 224x224 JPEG dict, `problem`
with `<image>`, `answer`) of N rows, then, in a fresh process: loads the tiny model, builds the
geometry task from the file (lazy references into the memory-mapped Arrow table) and runs the
first RL step through the real loop pieces (MediaStream -> collect -> update). Reports the RSS the
task build adds, and the seconds from "model loaded" to the first step's start and end.
Targets: at most 300 MB added by the build; first step starting within 30 s.

    python benchmarks/memory/data_memory.py --rows 20000
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "data_memory.json"


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def write_parquet(path: Path, rows: int, seed: int = 0) -> float:
    """A Geometry3K-like Parquet file; returns its size in MB."""
    import datasets
    from PIL import Image, ImageDraw

    import numpy as np

    rng, np_rng = random.Random(seed), np.random.default_rng(seed)

    def gen():
        for i in range(rows):
            img = Image.new("RGB", (224, 224), tuple(rng.randrange(256) for _ in range(3)))
            d = ImageDraw.Draw(img)
            for _ in range(4):
                x, y = rng.randrange(200), rng.randrange(200)
                d.ellipse([x, y, x + rng.randint(10, 60), y + rng.randint(10, 60)], fill=tuple(rng.randrange(256) for _ in range(3)))
            noise = np_rng.integers(-24, 25, (224, 224, 3))  # texture, so JPEGs are photo-sized (~15 KB)
            img = Image.fromarray(np.clip(np.asarray(img, dtype=np.int16) + noise, 0, 255).astype(np.uint8))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=85)
            yield {"images": [{"bytes": buf.getvalue(), "path": None}], "problem": f"<image>Find x in figure {i}.",
                   "answer": str(rng.randint(1, 99))}

    feats = datasets.Features({"images": datasets.List(datasets.Image()), "problem": datasets.Value("string"),
                               "answer": datasets.Value("string")})
    datasets.Dataset.from_generator(gen, features=feats, cache_dir=str(path.parent / "gen-cache")).to_parquet(str(path))
    return path.stat().st_size / 2**20


def measure(path: str, rows: int, cache_dir: str) -> dict:
    """Child process: model load, task build, first RL step; RSS and times."""
    import torch

    torch.set_num_threads(1)
    import datasets  # noqa: F401 - imported before the baseline, as in a run

    from mmrlvr.checks.resolve import resolve_algo
    from mmrlvr.config import load_config
    from mmrlvr.data.feed import MediaStream
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from mmrlvr.tasks import load_task
    import dataclasses

    from mmrlvr.train.learner import Learner
    from mmrlvr.data.sources import SeededStream
    from mmrlvr.recipe.step import advantages_for, collect
    from mmrlvr.verifiers.score import make_scorer

    cfg = load_config(None, ["task.name=geometry", "rollout.prompts_per_step=8", "rollout.group_size=4",
                             "rollout.max_new_tokens=8", "verifier_workers=0"])
    model, processor = load_policy("tiny")
    t_loaded = time.perf_counter()
    rss_before = rss_mb()
    samples = load_task("geometry", "train", rows, 0, data=path, holdout_frac=0.0, cache_dir=cache_dir)
    t_built = time.perf_counter()
    rss_after = rss_mb()
    cfg = dataclasses.replace(cfg, algo=resolve_algo(cfg.algo, cfg.rollout.max_new_tokens, cfg.rollout.engine))
    engine = HFRolloutEngine(model, processor)
    scorer = make_scorer(cfg.verifier_timeout, cfg.verifier_workers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    stream = MediaStream(SeededStream(samples, 0), 0.01)
    t_start = time.perf_counter()
    batch = collect(engine, stream, scorer, cfg, seed=1)
    Learner(cfg, model, optimizer, accelerator, engine.suppress_ids).update(batch, advantages_for(batch, cfg), seed=1)
    t_end = time.perf_counter()
    stream.close()
    return {
        "rows": len(samples), "rss_before_build_mb": round(rss_before, 1), "rss_after_build_mb": round(rss_after, 1),
        "rss_added_by_build_mb": round(rss_after - rss_before, 1), "build_s": round(t_built - t_loaded, 2),
        "first_step_start_s": round(t_start - t_loaded, 2), "first_step_end_s": round(t_end - t_loaded, 2),
        "rss_peak_after_step_mb": round(rss_mb(), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--work", default=None, help="folder for the Parquet file and the Arrow cache")
    ap.add_argument("--child", nargs=2, metavar=("PARQUET", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.rows, args.child[1])))
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="mmrlvr-datamem-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"geo_{args.rows}.parquet"
    t0 = time.perf_counter()
    size = write_parquet(path, args.rows) if not path.exists() else path.stat().st_size / 2**20
    t_write = time.perf_counter() - t0
    results = []
    for run in ("cold Arrow cache", "warm Arrow cache"):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--child", str(path), str(work / "cache")],
                             capture_output=True, text=True, env=env, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["run"] = run
        results.append(res)
    decoded_mb = args.rows * 224 * 224 * 3 / 2**20
    print(f"{args.rows} rows, Parquet {size:.0f} MB (written in {t_write:.0f} s); all images decoded would be {decoded_mb:.0f} MB")
    print("| run | rows | RSS added by the build (MB) | build (s) | first step starts (s) | first step ends (s) |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['run']} | {r['rows']} | {r['rss_added_by_build_mb']} | {r['build_s']} | {r['first_step_start_s']} | {r['first_step_end_s']} |")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"rows": args.rows, "parquet_mb": round(size, 1), "decoded_all_mb": round(decoded_mb),
                                   "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
