"""Settings the machine cannot hold are one line each before anything heavy runs: rows of one step
or one generate call against the memory, token lengths against the model's context, generated
task sizes. Hand-computed from the tiny model's config."""

import pytest

from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors
from mmrlvr.checks.bounds import PROMPT_TOKENS, TINY_CONTEXT, generate_bytes, text_config


def _errors(*overrides):
    return config_errors(load_config("configs/quickstart.yaml", list(overrides)))


def test_the_tiny_models_context_and_size_are_its_config(tiny):
    model, _ = tiny
    cfg = model.config.text_config
    t = text_config("tiny")
    assert t["max_position_embeddings"] == cfg.max_position_embeddings == TINY_CONTEXT
    assert t["num_hidden_layers"] == cfg.num_hidden_layers and t["num_key_value_heads"] == cfg.num_key_value_heads
    assert t["head_dim"] == cfg.hidden_size // cfg.num_attention_heads
    assert abs(t["vocab_size"] - cfg.vocab_size) <= 0.1 * cfg.vocab_size  # the logits term: within 10%


def test_generate_bytes_by_hand():
    text = {"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1000}
    # K and V: 2 x 4 layers x 2 heads x 32 x 4 bytes = 2,048 bytes a token; logits + probs 8,000 a row
    assert generate_bytes(3, 36, text, 4) == 3 * ((PROMPT_TOKENS + 36) * 2048 + 8000)
    assert generate_bytes(3, 36, text, 2) == 3 * ((PROMPT_TOKENS + 36) * 1024 + 8000)


@pytest.mark.parametrize("overrides, key, says", [
    (["rollout.group_size=1000000"], "rollout.group_size=1000000", "a step of 16,000,000 rows"),
    (["rollout.group_size=1000000", "rollout.generate_max_rows=64"], "rollout.group_size=1000000", "holds at least"),
    (["rollout.group_size=512", "rollout.prompts_per_step=64", "rollout.max_new_tokens=2000"],
     "rollout.group_size=512", "one generate call of 32,768 rows"),
    (["rollout.max_new_tokens=1000000000"], "rollout.max_new_tokens=1000000000", "context of 2,048 tokens"),
    (["eval.max_new_tokens=2048"], "eval.max_new_tokens=2048", "context of 2,048 tokens"),
    (["task.train_size=1000000000000"], "task.train_size=1000000000000", "generates every sample up front"),
])
def test_what_cannot_be_held_is_one_line(overrides, key, says):
    errors = _errors(*overrides)
    hits = [e for e in errors if e.startswith(key)]
    assert len(hits) == 1 and says in hits[0], errors


def test_a_bounded_generate_call_fits_and_ordinary_settings_pass():
    assert _errors() == []
    assert _errors("rollout.group_size=512", "rollout.prompts_per_step=64", "rollout.max_new_tokens=2000",
                   "rollout.generate_max_rows=512") == []
    assert _errors("rollout.max_new_tokens=2047") == []  # below the context
