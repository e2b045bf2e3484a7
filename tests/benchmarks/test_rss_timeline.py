"""benchmarks/memory/rss_timeline.py: the peak between marks, and saved bytes put on the module that saved them."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.memory.rss_timeline import Timeline, kept_by_module  # noqa: E402


def test_each_mark_gets_the_peak_until_the_next():
    tl = Timeline(interval=0.001)
    tl.phases()  # stops the sampling thread
    tl.samples = [(0.0, 100.0), (1.0, 180.0), (2.0, 120.0), (3.0, 150.0), (4.0, 200.0)]
    tl.marks = [(0.5, "a", 110.0), (2.5, "b", 140.0), (3.5, "c", 135.0)]
    rows = tl.phases()
    assert [(r["mark"], r["rss_mb"], r["peak_until_next_mb"]) for r in rows] == [
        ("a", 110.0, 180.0), ("b", 140.0, 150.0), ("c", 135.0, 200.0)]


class ToyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(64))

    def forward(self, x):
        return x * self.w  # saves x, for the weight's gradient (x needs none)


class ToyAttention(torch.nn.Module):
    def forward(self, x):
        return x * x  # saves x twice: one storage, counted once


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp, self.visual = ToyMLP(), torch.nn.Module()
        self.visual.attn = ToyAttention()

    def forward(self, x):
        out = self.visual.attn(self.mlp(x))
        return (out * out).sum()  # saved outside every module


def test_saved_bytes_go_to_the_module_that_saved_them():
    model = Toy()
    x = torch.randn(1024, 64)  # 256 KB
    kept = kept_by_module(model, lambda: model(x).backward())
    mb = 1024 * 64 * 4 / 2**20
    assert kept == {"L:ToyMLP": mb, "V:ToyAttention": mb, "other": mb}
    assert model.mlp.w.grad is not None and not model.mlp._forward_hooks and not model.mlp._forward_pre_hooks
