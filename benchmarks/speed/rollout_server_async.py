"""Step time of synchronous against one-step-asynchronous rollouts with a rollout server (no timed asserts).

    # one key for both sides (the server refuses every POST without it)
    export MMRLVR_ROLLOUT_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
    # the server, in the vLLM environment (its own core):
    VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 \\
      ~/.cache/mmrlvr-vllm-venv/bin/python -m mmrlvr.cli rollout-server --model tiny --dtype float32 \\
      --max-model-len 1024 --enforce-eager --port 18432
    # the learner, in the main environment (the other core):
    python benchmarks/speed/rollout_server_async.py --url http://127.0.0.1:18432 [--steps 8] [--max-new-tokens 32]

Runs the same `mmrlvr train` (quickstart, float32, warm start 40 steps) with rollout.async_steps 0 and 1
against the server and reports the median `time/step` of steps 2..N (step 1 is synchronous in both)
and its parts. What the overlap can give: a step costs gen + update synchronously and
max(gen, update) asynchronously (plus the weight sync in both), so the ratio is bounded below by
max(gen, update) / (gen + update); on GPUs with generation ~70% of a step (verl's and TRL's
reports for RLVR) that is ~0.7, at equal times 0.5.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(url: str, async_steps: int, steps: int, max_new_tokens: int, out: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", "rollout.engine=vllm_server",
           f"rollout.server_url={url}", f"rollout.async_steps={async_steps}", "model.dtype=float32",
           f"train.steps={steps}", "warm_start.steps=40", "task.eval_size=16", "train.log_every=1",
           f"rollout.max_new_tokens={max_new_tokens}", f"output_dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "time/step" in r and r["step"] >= 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for a in (0, 1):
            rows = run(args.url, a, args.steps, args.max_new_tokens, Path(d) / f"async{a}")
            res[a] = {k: statistics.median(r[k] for r in rows) for k in ("time/step", "time/rollout", "time/update")}
            res[a]["staleness"] = sorted({r.get("rollout/staleness") for r in rows})
    gen, upd = res[0]["time/rollout"], res[0]["time/update"]
    print(json.dumps({"sync": res[0], "async": res[1], "async_over_sync_step": res[1]["time/step"] / res[0]["time/step"],
                      "bound_max_over_sum": max(gen, upd) / (gen + upd)}, indent=1))


if __name__ == "__main__":
    main()
