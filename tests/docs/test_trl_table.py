"""The TRL-to-mmrlvr table of the verifier how-to names only config keys that exist, and the values it
names for `algo.aggregation` are ones the loss accepts."""

from __future__ import annotations

import re

from mmrlvr.config import Config
from mmrlvr.config.keys import schema_keys

from .conftest import DOCS


def _table() -> list[str]:
    text = (DOCS / "how-to" / "your-verifier.md").read_text(encoding="utf-8")
    start = text.index("| TRL | mmrlvr |")
    return [line for line in text[start:].split("\n\n")[0].splitlines()[2:]]


def test_every_key_the_trl_table_names_exists():
    rows = _table()
    assert len(rows) >= 10
    keys = {k for row in rows for k in re.findall(r"`((?:algo|rollout|train)\.[a-z_]+)", row)}
    assert {"rollout.group_size", "algo.kl_coef", "algo.clip_high", "algo.ppo_epochs"} <= keys
    assert sorted(keys - set(schema_keys(Config))) == []
    from mmrlvr.algos.losses import AGGREGATIONS

    row = next(r for r in rows if "`loss_type`" in r)
    assert set(re.findall(r"`([a-z-]+-[a-z-]+)`", row)) <= set(AGGREGATIONS)
