"""benchmarks/memory/micro_batch_tokens.py measures what it says: the update it times runs in as many
micro-batches as the budget needs, and the padding it reports is the learner's count."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.memory.micro_batch_tokens import child  # noqa: E402


def test_the_benchmark_update_follows_the_budget():
    whole = child(4, 2, 16, None)
    packed = child(4, 2, 16, 120)
    assert whole["rows"] == packed["rows"] == 8
    assert whole["micro_batches"] == 1
    # 2 groups of 4 rows, 48-token prompts, completions up to 16: a group under prompt_once is
    # 47 + 4 x 17 = 115 <= 120 tokens, two are 2 x 47 + 8 x 17 = 230: one group per micro-batch
    assert packed["micro_batches"] == 2
    assert packed["padding_waste"] <= whole["padding_waste"]
    assert whole["peak_above_baseline_mb"] >= 0 and packed["update_s"] > 0
