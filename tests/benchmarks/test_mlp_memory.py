"""benchmarks/memory/mlp_memory.py measures what it says: with `train.recompute_mlp` on, autograd keeps
exactly two (positions, I) tensors fewer per MLP call; with `train.mask_once` on, exactly
(layers - 1) mask copies fewer per forward; and the update's weights are the same."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import rss_peak  # noqa: E402
from benchmarks.memory.mlp_memory import child  # noqa: E402


def test_the_measured_saving_is_the_two_tensors_per_call(monkeypatch):
    from mmrlvr.models.patches import gated_mlp

    positions = []
    real = gated_mlp._GatedDown.apply
    monkeypatch.setattr(gated_mlp._GatedDown, "apply",
                        lambda gate, *a: (positions.append(gate.shape[:-1].numel()), real(gate, *a))[1])
    off = child("tiny", False, 2, 2, 8)
    on = child("tiny", True, 2, 2, 8)
    assert positions and off["weights"] == on["weights"]
    saved = 2 * sum(positions) * on["intermediate"] * 4
    assert off["kept_bytes"] - on["kept_bytes"] == saved
    assert on["peak_above_baseline_mb"] >= 0 and on["update_s"] > 0


def test_the_measured_mask_saving_is_the_copies_per_layer(monkeypatch):
    from mmrlvr.models.patches import attention_mask

    made = []
    real = attention_mask.additive_mask
    monkeypatch.setattr(attention_mask, "additive_mask",
                        lambda m, d: (made.append((m.numel(), real(m, d).untyped_storage().nbytes())), real(m, d))[1])
    off = child("tiny", False, 2, 3, 8, setting="mask_once")
    assert not made
    on = child("tiny", True, 2, 3, 8, setting="mask_once")
    assert made and off["weights"] == on["weights"] and on["setting"] == "mask_once" and on["mask_once"]
    # SDPA's contiguous copy in every layer, against one shared copy with padded rows
    assert off["kept_bytes"] - on["kept_bytes"] == sum(on["layers"] * n * 4 - padded for n, padded in made)


def test_rss_peak_sees_a_temporary_allocation():
    """In a fresh process: in the suite's long-lived one, glibc may hand the 64 MB back from pages
    an earlier test left resident, and the RSS never rises (CI saw 0.004 MB)."""
    import json
    import subprocess

    code = ("import json, sys, time; sys.path.insert(0, '.'); import numpy as np; from benchmarks.common import rss_peak\n"
            "with rss_peak() as mem:\n"
            "    block = np.ones(64 * 2**20 // 8); seen = mem['samples']; t = time.monotonic()\n"
            "    while mem['samples'] < seen + 2 and time.monotonic() < t + 5: time.sleep(0.01)\n"
            "    del block\n"
            "print(json.dumps(mem))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, check=True)
    mem = json.loads(out.stdout)
    assert mem["above_mb"] > 50 and mem["seconds"] >= 0


def test_the_measured_norm_saving_in_bfloat16(monkeypatch):
    """bf16 weights: each swapped call keeps the bf16 input instead of the float32 copy, the root
    and the normed tensor; the update's weights are the same."""
    from mmrlvr.models.patches import rms_norm

    calls = []
    real = rms_norm._RMSNorm.apply
    monkeypatch.setattr(rms_norm._RMSNorm, "apply",
                        lambda x, w, eps: (calls.append((x.numel(), x.shape[-1], w.requires_grad)), real(x, w, eps))[1])
    off = child("tiny", False, 2, 3, 8, setting="recompute_norm", dtype="bfloat16")
    assert not calls
    on = child("tiny", True, 2, 3, 8, setting="recompute_norm", dtype="bfloat16")
    assert calls and off["weights"] == on["weights"] and on["dtype"] == "bfloat16"
    assert off["kept_bytes"] - on["kept_bytes"] >= sum(4 * n + 4 * (n // h) + (2 * n if t else 0) - 2 * n
                                                       for n, h, t in calls) > 0
