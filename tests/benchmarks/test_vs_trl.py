"""The vs-TRL summary: medians over measured steps (the warm-up dropped), the repeats' spread, the
decoding steps each sampler ran and the generation cost per decoding step, checked by hand on
two repeats with completions of different lengths; and the README table it prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.speed.vs_trl import _summarise, markdown, rss_above_floor  # noqa: E402

SHAPE = {"name": "s", "group": 4, "max_new": 32, "prompts": 2}


def _run(step, gen, max_len, mean_len):
    n = len(step)
    return {"step_s": step, "gen_s": gen, "logprob_s": [0.0] * n, "update_s": [s - g for s, g in zip(step, gen)],
            "reward": [0.5] * n, "mean_length": mean_len, "max_length": max_len,
            "gen_tokens": [m * 8 for m in mean_len], "mixed": [0.5] * n, "world": 1, "peak_rss_mb": 900.0}


def test_summary_by_hand():
    a = _run([9.0, 1.0, 2.0, 3.0], [9.0, 0.2, 0.9, 0.3], [32, 10, 30, 12], [20.0, 6.0, 12.0, 7.0])
    b = _run([9.0, 4.0, 5.0, 6.0], [9.0, 0.5, 1.0, 0.6], [32, 5, 20, 24], [20.0, 4.0, 9.0, 11.0])
    s = _summarise("mmrlvr", SHAPE, [a, b])
    assert s["s_per_step"] == pytest.approx(3.5)  # median of 1, 2, 3, 4, 5, 6 (warm-ups dropped)
    assert s["spread"] == pytest.approx([2.0, 5.0])  # the repeats' medians
    assert s["gen_s"] == pytest.approx(0.55)  # median of 0.2 0.9 0.3 0.5 1.0 0.6
    assert s["max_length"] == pytest.approx((10 + 30 + 12 + 5 + 20 + 24) / 6)
    assert s["mean_length"] == pytest.approx((6 + 12 + 7 + 4 + 9 + 11) / 6)
    # per decoding step: 20, 30, 25, 100, 50, 25 ms -> median 27.5
    assert s["gen_ms_per_decode_step"] == pytest.approx(27.5)
    assert s["completions_per_s"] == pytest.approx(8 / 3.5)
    assert (s["repeats"], s["steps"]) == (2, 3)


def test_readme_table_names_the_reference_arm_and_the_new_columns():
    a = _run([9.0, 1.0, 3.0], [9.0, 0.4, 0.6], [32, 8, 12], [9.0, 5.0, 6.0])
    t = _run([9.0, 4.0, 6.0], [9.0, 0.8, 1.0], [32, 16, 20], [9.0, 7.0, 8.0])
    m, ref = _summarise("mmrlvr", SHAPE, [a]), _summarise("trl_nogc", SHAPE, [t])
    m["speedup_vs_trl_nogc"], m["rss_vs_trl_nogc"] = ref["s_per_step"] / m["s_per_step"], 0.5
    text = markdown({"results": {"s": {"mmrlvr": m, "trl_nogc": ref}}})
    assert "| s | 2.000 | 5.000 (trl_nogc) | **2.50x** | **0.50** | - | - | - | - |" in text  # no floor measured
    m["floor_rss_mb"], m["rss_above_floor_vs_trl_nogc"] = 800.0, rss_above_floor(900.0, 1300.0, 800.0)
    assert m["rss_above_floor_vs_trl_nogc"] == pytest.approx(0.2)  # (900 - 800) / (1300 - 800)
    text = markdown({"results": {"s": {"mmrlvr": m, "trl_nogc": ref}}})
    assert "| s | 2.000 | 5.000 (trl_nogc) | **2.50x** | **0.50** | 800 | 0.20 | - | - |" in text
    assert "max len | gen ms / decoding step" in text
    assert "| 10.0 | 50.0 |" in text  # mmrlvr: max lengths 8, 12; 400/8 = 50 and 600/12 = 50 ms
