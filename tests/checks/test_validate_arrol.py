"""sample_efficiency.arrol is checked before anything heavy runs: each bad value is one line naming
its key, and what arrol needs of the rest of the config is named only when it is on."""

from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors

A = "sample_efficiency.arrol"


def _errors(*overrides: str) -> list[str]:
    return config_errors(load_config(None, list(overrides)))


def test_bad_values_are_named_one_line_each():
    errors = _errors(f"{A}.over_generation=0.5", f"{A}.prefix_tokens=0", f"{A}.target_pos_share=1.5",
                     f"{A}.positive_at=0", f"{A}.head_lr=0", f"{A}.head_steps=0", f"{A}.min_auroc=-1",
                     f"{A}.auroc_window=0", f"{A}.min_labels=0", f"{A}.eval_weighting=vote",
                     f"{A}.head_weight_decay=-1")
    for key in ("over_generation=0.5", "prefix_tokens=0", "target_pos_share=1.5", "positive_at=0", "head_lr=0",
                "head_steps=0", "min_auroc=-1", "auroc_window=0", "min_labels=0", "eval_weighting='vote'",
                "head_weight_decay=-1"):
        assert sum(e.startswith(f"{A}.{key}") for e in errors) == 1, (key, errors)


def test_what_arrol_needs_of_the_rest_only_when_on():
    needs = ["rollout.max_new_tokens=8", f"{A}.prefix_tokens=8", "rollout.episode=tools", "rollout.async_steps=1",
             "rollout.group_size=4", "rollout.generate_max_rows=6"]
    off = [e for e in _errors(*needs) if e.startswith(("sample_efficiency", "rollout.generate_max_rows"))]
    assert off == []
    on = _errors(*needs, f"{A}.enabled=true")
    assert f"{A}.prefix_tokens=8: expected < rollout.max_new_tokens (8): a pruned row must save something" in on
    assert any(e.startswith("rollout.episode='tools': expected single with sample_efficiency.arrol") for e in on)
    assert any(e.startswith("rollout.async_steps=1: expected 0 with sample_efficiency.arrol") for e in on)
    # 4 x over_generation 2 = 8 rows a prompt: a call of 6 rows cannot hold a group
    assert any(e.startswith("rollout.generate_max_rows=6: at least the 8 rows arrol generates") for e in on)
    assert _errors(f"{A}.enabled=true") == []
