"""The metrics reference covers every name the code logs, and every key a real tiny run writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import page

ROOT = Path(__file__).resolve().parents[2]

def test_the_scan_finds_names_in_fstrings_and_constants(tmp_path, gen_metrics):
    pkg = tmp_path / "mmrlvr" / "train"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text('x = {"loss/new_term": 1}\ny = f"reward/{name}/{k}"\nz = "time/"\nw = "a/b c"\n'
                              'v = {f"s/{k}": 1}\n')
    # kept: the constant and the f-string (fields as <x>); left out: a bare prefix, text with a space,
    # the internal all-reduce key
    assert gen_metrics.code_metric_names(tmp_path) == {"loss/new_term": ["mmrlvr/train/m.py"],
                                                       "reward/<name>/<k>": ["mmrlvr/train/m.py"]}
    assert gen_metrics.documented("loss/new_term") is None
    assert gen_metrics.documented("reward/<name>/<k>") == "reward/<name>/<k>"
    # a pattern covers a key only with as many segments: eval/<task>/<name> is not a term's part
    assert gen_metrics.documented("eval/counting/accuracy") == "eval/<task>/<name>"
    assert gen_metrics.documented("eval/counting/count/format") == "eval/<task>/<name>/<k>"
    assert gen_metrics.documented("actor/clip_frac_low") == "actor/clip_frac_low"  # the exact entry first


def test_every_metric_name_in_the_code_is_documented(gen_metrics):
    names = gen_metrics.code_metric_names()
    assert "rollout/mixed_group_frac" in names and "reward/<name>" in names
    undocumented = [n for n in names if gen_metrics.documented(n) is None]
    assert not undocumented, f"add these to METRICS in docs/gen_metrics.py: {undocumented}"


@pytest.fixture(scope="module")
def tiny_run_keys(tiny_run) -> set[str]:
    rows = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    return {k for row in rows for k in row if k != "step"}


def test_every_key_a_tiny_run_logs_is_documented(tiny_run_keys, gen_metrics, gen_reference):
    assert {"actor/clip_frac", "tokens/perception_frac", "reward/count/format", "eval/counting/accuracy"} <= tiny_run_keys
    undocumented = sorted(k for k in tiny_run_keys if gen_metrics.documented(k) is None)
    assert not undocumented, f"logged but not in docs/gen_metrics.py METRICS: {undocumented}"
    text = page(gen_reference, "reference/metrics.md")
    assert all(f"`{gen_metrics.documented(k)}`" in text for k in tiny_run_keys)


def test_no_documented_metric_is_stale(tiny_run_keys, gen_metrics):
    """Each METRICS entry is still written by the code, or logged by the tiny run (actor/<k> keys are
    built from the loss's statistics, so only a run shows them)."""
    seen = {gen_metrics.documented(n) for n in [*gen_metrics.code_metric_names(), *tiny_run_keys]}
    stale = [name for name, _ in gen_metrics.METRICS if name not in seen]
    assert not stale, f"documented metrics no code writes: {stale}"
