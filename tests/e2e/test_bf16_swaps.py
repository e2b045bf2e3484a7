"""A whole bf16 run (warm start, rollouts, updates, evaluation; bf16 forwards over float32 master
weights) gives the same metrics and final weights bit for bit with the learner's three memory swaps on (`train.recompute_mlp`,
`train.mask_once`, `train.recompute_norm`: the defaults) as with all three off."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from tests.e2e.test_step_reference import SMALL, USER

STEPS = 3


def _run(out: Path, on: bool) -> tuple[list[dict], str]:
    from mmrlvr.config import load_config
    from mmrlvr.models.patches import rms_norm
    from mmrlvr.recipe.loop import train

    flag = str(on).lower()
    swapped = []
    real = rms_norm._RMSNorm.apply
    rms_norm._RMSNorm.apply = lambda *a: (swapped.append(1), real(*a))[1]
    try:
        train(load_config(Path(__file__).resolve().parents[2] / "configs/quickstart.yaml", [
            *SMALL, f"train.steps={STEPS}", f"train.save_every={STEPS}", "model.dtype=bfloat16",
            f"rewards=[{{verifier: {USER}:even_length}}]", f"output_dir={out}",
            f"train.recompute_mlp={flag}", f"train.mask_once={flag}", f"train.recompute_norm={flag}"]))
    finally:
        rms_norm._RMSNorm.apply = real
    assert bool(swapped) == on  # the bf16 norms were swapped in the run with the swaps on
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/tokens_per_s"} for r in rows]
    weights = load_file(out / "checkpoints" / f"step_{STEPS}" / "model.safetensors")
    # the checkpoint holds the float32 master weights the bf16 forwards were rounded from
    assert all(w.dtype == torch.float32 for w in weights.values())
    digest = hashlib.sha256(b"".join(weights[k].view(torch.int32).numpy().tobytes() for k in sorted(weights)))
    return rows, digest.hexdigest()


def test_a_bf16_run_is_the_same_with_the_swaps(tmp_path):
    off_rows, off_weights = _run(tmp_path / "off", False)
    on_rows, on_weights = _run(tmp_path / "on", True)
    updated = [r for r in on_rows if r.get("loss/policy", 0.0) != 0.0]
    assert updated, "no step updated the policy: the comparison would be empty"
    assert on_rows == off_rows
    assert on_weights == off_weights
