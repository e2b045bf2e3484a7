"""The plan's activation model against measured peaks on CPU, float32: one update's bytes beyond the
weights and their gradients, counted by benchmarks/memory/plan_activations.py's dispatch-mode storage
counter (every operator output's storage followed by a weak reference: exact bytes live at once).
The tiny model with and without gradient checkpointing, and two decoder layers of Qwen2.5-VL-3B's
width with it (what the GPU configs run), three token budgets each, within 25%."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import benchmarks.memory.plan_activations as pa  # noqa: E402


@pytest.mark.parametrize("name,checkpointing", [("tiny", False), ("tiny", True), ("3B-width", True)])
def test_planned_activations_match_measured_peaks(name, checkpointing):
    rows = [pa.measure(name, *case, checkpointing) for case in pa.CASES[name]]
    tokens = [r["computed_tokens"] for r in rows]
    assert tokens == sorted(tokens) and tokens[-1] >= 2.5 * tokens[0]  # three distinct budgets
    for r in rows:
        assert abs(r["ratio"] - 1) <= pa.TOLERANCE, r


def test_the_counter_sees_what_is_live():
    import torch

    with pa.PeakBytes() as counter:
        a = torch.ones(1000, 250)  # 1 MB
        b = a * 2  # 1 MB more
        v = b.view(-1)  # a view: no new storage
        del a  # 1 MB live
        c = b + 1  # 2 MB live again: the peak stays 2 MB
        del b, v
        assert counter.now == 1_000_000
        del c
    assert counter.peak == 2_000_000 and counter.now == 0


def test_packed_activations_match_measured_peaks():
    """Under `train.padding_free` (every row at its full length, the plan's geometry): the rows' tokens
    in one sequence, no prompt shared, and one block-diagonal mask over all of them, whose
    boolean + additive copies grow with the square of the tokens (151 MB of the 344 MB at 5,632)."""
    rows = [pa.measure("tiny", *case, False, packed=True) for case in pa.CASES["tiny"]]
    for r in rows:
        assert abs(r["ratio"] - 1) <= pa.TOLERANCE, r
        assert r["parts_mb"]["mask"] == pytest.approx(r["computed_tokens"] ** 2 * (1 + 4) / 2**20, abs=0.01)
