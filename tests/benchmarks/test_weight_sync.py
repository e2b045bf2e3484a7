"""benchmarks/speed/weight_sync.py measures what it says: the whole policy crosses the weight channel
(every tensor received, bf16 bytes = 2 x parameters) in the buckets the bucket size cuts, and the
script writes its JSON and table rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.speed import weight_sync  # noqa: E402


def test_the_tiny_model_crosses_whole_in_the_buckets_its_size_cuts(tmp_path, capsys):
    out = tmp_path / "ws.json"
    assert weight_sync.main(["--models", "tiny", "--repeats", "2", "--bucket-mb", "1", "--out", str(out)]) == 0
    (r,) = json.loads(out.read_text())["results"]
    pairs = weight_sync.build("tiny", 2, tmp_path)
    params = sum(t.numel() for _, t in pairs)
    assert r["params"] == params and r["bytes"] == 2 * params  # every tensor bf16
    assert max(t.numel() * 2 for _, t in pairs) < 2**18  # no tensor over 1/4 MiB: every bucket but the last > 3/4 full
    assert -(-r["bytes"] // 2**20) <= r["buckets"] <= -(-r["bytes"] // (3 * 2**18))
    assert len(r["seconds"]) == 2 and all(s > 0 for s in r["seconds"])
    assert "| tiny | - |" in capsys.readouterr().out
