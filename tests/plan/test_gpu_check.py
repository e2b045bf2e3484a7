"""benchmarks/gpu/gpu_check.py: its CPU smoke mode (`--cpu --tiny`) runs three RL steps end to end with
the packages the GPU machine lacks blocked, writes the JSON report with the plan beside it, and every
trained tensor moves; the 3B architecture it builds there is Qwen2.5-VL-3B's, at the tiny tokenizer's ids."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("math_verify", "qwen_vl_utils", "decord", "cv2", "datasets", "vllm", "tensorboard", "latex2sympy2_extended")


def _bare_checkout(dest: Path) -> Path:
    """What the device tool carries: the tracked and untracked-but-not-ignored files, nothing built."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files a bare checkout holds")
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _without_the_installed_package(checkout: Path) -> dict:
    """Environment for `python -S`: the interpreter's site-packages on the path as plain folders, so torch
    and transformers import but no `.pth` file runs (an editable install of mmrlvr is one), and the checkout
    first, as the GPU machine's `PYTHONPATH=<checkout>` puts it."""
    sites = [p for p in site.getsitepackages() if Path(p).is_dir()]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), *sites]), "OMP_NUM_THREADS": "1"}


def test_cpu_tiny_smoke_mode_from_a_bare_checkout_with_nothing_installed(tmp_path):
    checkout = _bare_checkout(tmp_path / "checkout")
    env = _without_the_installed_package(checkout)
    # the Python the check runs under cannot import the installed mmrlvr: only the checkout provides it
    without = {**env, "PYTHONPATH": env["PYTHONPATH"].split(os.pathsep, 1)[1]}
    probe = subprocess.run([sys.executable, "-S", "-c", "import mmrlvr"], cwd=tmp_path, env=without,
                           capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'mmrlvr'" in probe.stderr, probe.stderr
    out = tmp_path / "gpu_check.json"
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in BLOCKED)  # `import m` then raises ImportError
    code = (f"import sys, runpy; {block}; sys.argv = ['gpu_check.py', '--cpu', '--tiny', '--out', {str(out)!r}]; "
            "runpy.run_path('benchmarks/gpu/gpu_check.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert len(report["steps"]) == 3 and report["all_moved"] and report["moved_tensors"] == report["trained_tensors"] > 0
    assert set(report["phases"]) == {"rollout", "reference", "update", "evaluation"}
    assert all(p["planned_gb"] is not None for p in report["phases"].values())
    for step in report["steps"]:
        # 2 prompts x 2 samples x at most 8 new tokens
        assert 0 < step["generated_tokens"] <= 2 * 2 * 8 and step["update_tokens_per_s"] > 0
    assert report["mfu"] is None and report["device"] == "cpu"
    # the last batch updated padded and packed, one after the other: the same tokens, packed computing no padding
    assert report["packed_padding_waste"] == 1.0 and report["padded_padding_waste"] >= 1.0
    for arm in ("padded", "packed"):
        assert report[f"{arm}_update_tokens_per_s"] > 0 and report[f"{arm}_update_peak_gb"] is None
    assert report["packed_speedup"] == pytest.approx(report["padded_update_s"] / report["packed_update_s"], abs=0.01)
    # the one-screen summary after the JSON: every phase with its planned figure, and the verdict
    screen = proc.stdout[proc.stdout.index("gpu_check: tiny on cpu"):].splitlines()
    assert len(screen) <= 24
    for name, phase in report["phases"].items():
        assert any(line.split()[:3] == [name, "-", f"{phase['planned_gb']:.2f}"] for line in screen), (name, screen)
    assert screen[-2].startswith(f"update tokens/s padded: {report['padded_update_tokens_per_s']}   packed: "
                                 f"{report['packed_update_tokens_per_s']}")
    assert screen[-1].startswith(f"all moved: True ({report['trained_tensors']} of {report['trained_tensors']}")


def test_a_source_checkout_imports_its_own_tasks(tmp_path):
    # the checkout's tasks/ is `mmrlvr.tasks` without an install, and never another checkout's
    checkout = _bare_checkout(tmp_path / "checkout")
    code = "import mmrlvr.tasks, mmrlvr.tasks.generic as g; print(mmrlvr.tasks.__file__); print(g.__file__)"
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path,
                          env=_without_the_installed_package(checkout), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(checkout / "tasks" / "__init__.py"), str(checkout / "tasks" / "generic.py")]


def test_the_3b_path_builds_the_model(monkeypatch):
    # the GPU-only branch of the model build, on the meta device: no name it uses is left undefined
    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu.gpu_check import CONFIG, _processor_and_model

    from mmrlvr.config import load_config

    cfg = load_config(CONFIG, ["model.gradient_checkpointing=false"])
    processor, model = _processor_and_model(cfg, tiny=False, device="meta")
    assert model.config.model_type == "qwen2_5_vl" and next(model.parameters()).device.type == "meta"
    assert model.generation_config.pad_token_id == processor.tokenizer.pad_token_id is not None
    assert model.generation_config.eos_token_id == processor.tokenizer.convert_tokens_to_ids("<|im_end|>")


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


def test_the_summary_says_when_the_packed_update_failed_or_was_refused():
    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu.gpu_check import summary

    base = {"model": "m", "device": "cpu", "torch": "t", "dtype": "bfloat16", "prompts": 1, "group_size": 2,
            "max_new_tokens": 8, "phases": {}, "plan_per_gpu_gb": 1.0, "plan_fits": True,
            "generated_tokens_per_s": 1.0, "update_tokens_per_s": 2.0, "mfu": None, "all_moved": True,
            "moved_tensors": 3, "trained_tensors": 3}
    failed = summary({**base, "packed_error": "RuntimeError: out of memory"}).splitlines()
    assert failed[-2] == "packed update: failed (RuntimeError: out of memory)" and failed[-1].startswith("all moved")
    refused = summary({**base, "packed_refused": "attention flash_attention_2 is not checked"}).splitlines()
    assert refused[-2] == "packed update: refused (attention flash_attention_2 is not checked)"
