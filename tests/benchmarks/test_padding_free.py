"""benchmarks/speed/padding_free.py at toy size: its JSON holds both arms of every case, the packed
update computes exactly the valid tokens, and the padded one's waste is the hand-counted one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.speed.padding_free import ARMS, CASES, METRICS, completion_lengths, main  # noqa: E402


def test_the_length_mix_is_long_tailed_with_one_full_row_per_group():
    assert completion_lengths("mix", [], 6, 3, 16) == [16, 13, 11, 16, 7, 6]  # seed 0, log-uniform in [4, 16]
    assert completion_lengths("own", [90, 100, 110], 2, 2, 16) == [90, 100]


def test_the_benchmark_writes_both_arms_of_every_case(tmp_path, capsys):
    out = tmp_path / "pf.json"
    assert main(["--inline", "--prompts", "2", "--group", "3", "--tokens", "16", "--repeats", "2",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [c["case"] for c in result["cases"]] == list(CASES)
    for case in result["cases"]:
        assert case["rows"] == 6 and len(case["completion_lengths"]) == 6
        for arm in ARMS:
            for m in METRICS:
                assert len(case[arm][m]) == 2
                lo, hi = case[arm][f"{m}_spread"]
                assert lo <= case[arm][f"{m}_median"] <= hi
            assert case[arm]["seconds_median"] > 0 and case[arm]["tensor_peak_mb"] > 0
        assert case["packed"]["waste"] == [1.0, 1.0]  # the real tokens only
        assert min(case["padded"]["waste"]) >= 1.0
        assert case["time_ratio_median"] > 0 and case["cpu_ratio_median"] > 0
    mix = result["cases"][list(CASES).index("mix")]
    # 2 counting prompts of 48 tokens, each once per group (prompt_once); completions
    # 16, 13, 11 | 16, 7, 6 (69), all padded to 16: computed 2 x 47 + 6 x (1 + 16) = 196,
    # valid 2 x 47 + 6 (each row's last prompt token) + 69 = 169
    assert mix["completion_lengths"] == [16, 13, 11, 16, 7, 6] and mix["prompt_lengths"] == [48] * 6
    assert mix["padded"]["waste"] == [pytest.approx(196 / 169)] * 2
    table = capsys.readouterr().out
    assert "| mix (counting) | 6 | 6-16 | 1.16 | 1.00 |" in table and result["table"] in table
