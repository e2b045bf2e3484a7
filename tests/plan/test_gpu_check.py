"""benchmarks/gpu/gpu_check.py: its CPU smoke mode (`--cpu --tiny`) runs three RL steps end to end with
the packages the GPU machine lacks blocked, writes the JSON report with the plan beside it, and every
trained tensor moves; the 3B architecture it builds there is Qwen2.5-VL-3B's, at the tiny tokenizer's ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("math_verify", "qwen_vl_utils", "decord", "cv2", "datasets", "vllm", "tensorboard", "latex2sympy2_extended")


def test_cpu_tiny_smoke_mode_without_the_missing_packages(tmp_path):
    out = tmp_path / "gpu_check.json"
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in BLOCKED)  # `import m` then raises ImportError
    code = (f"import sys, runpy; {block}; sys.argv = ['gpu_check.py', '--cpu', '--tiny', '--out', {str(out)!r}]; "
            "runpy.run_path('benchmarks/gpu/gpu_check.py', run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert len(report["steps"]) == 3 and report["all_moved"] and report["moved_tensors"] == report["trained_tensors"] > 0
    assert set(report["phases"]) == {"rollout", "reference", "update", "evaluation"}
    assert all(p["planned_gb"] is not None for p in report["phases"].values())
    for step in report["steps"]:
        # 2 prompts x 2 samples x at most 8 new tokens
        assert 0 < step["generated_tokens"] <= 2 * 2 * 8 and step["update_tokens_per_s"] > 0
    assert report["mfu"] is None and report["device"] == "cpu"


def test_the_3b_architecture_with_the_tiny_tokenizers_ids():
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from mmrlvr.models.tiny import ensure_tiny

    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu.gpu_check import qwen3b_config

    tok = AutoProcessor.from_pretrained(ensure_tiny()).tokenizer
    config, ids = qwen3b_config(tok)
    assert ids["image_token_id"] == tok.convert_tokens_to_ids("<|image_pad|>") < len(tok)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == 3_754_622_976
    assert model.config.image_token_id == ids["image_token_id"] and next(model.parameters()).dtype == torch.bfloat16
