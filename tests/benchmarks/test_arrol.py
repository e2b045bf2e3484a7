"""The arrol benchmark's arms and its per-method means, on hand-written rows."""

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_arrol", ROOT / "benchmarks/learning/arrol.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

A = "sample_efficiency.arrol"


def test_arms_generate_the_same_completions_per_prompt():
    assert bench.method_overrides("grpo_g8") == [f"{A}.enabled=false", "rollout.group_size=8"]
    assert bench.method_overrides("arrol") == [f"{A}.enabled=true", "rollout.group_size=4"]  # x over_generation 2
    assert bench.method_overrides("arrol_p8")[-1] == f"{A}.prefix_tokens=8"
    with pytest.raises(SystemExit, match="unknown method 'arrol_px'"):
        bench.method_overrides("arrol_px")


def test_means_skip_nan_and_missing_values():
    row = {"acc_before": 0.5, "tokens_generated": 400.0, "tokens_trained": 250.0, "s_per_step": 1.0,
           "gen_s_per_step": 0.5, "all_equal": 0.4, "reward": 0.5, "head_trusted": 1.0}
    runs = [{**row, "method": "arrol", "seed": 0, "acc_after": 0.6, "head_auroc": 0.7},
            {**row, "method": "arrol", "seed": 1, "acc_after": 0.8, "head_auroc": float("nan")},
            {**row, "method": "grpo_g8", "seed": 0, "acc_after": 0.7, "head_auroc": None, "head_trusted": None}]
    arrol, grpo = bench.mean_rows(runs)
    assert arrol["acc_after"] == pytest.approx(0.7) and arrol["acc_after_sd"] == pytest.approx(math.sqrt(0.02))
    assert arrol["head_auroc"] == 0.7  # the NaN seed (one class only) is left out
    assert grpo["head_auroc"] == "-" and grpo["acc_after_sd"] == 0.0 and grpo["seeds"] == 1
