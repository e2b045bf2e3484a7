"""`mmrlvr plan` under `train.padding_free`: the update's activations are sized by the packed tokens
(the rows' real tokens in one sequence, no prompt shared, one block-diagonal mask over all of them),
by hand against the padded plan, and the printed plan says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.plan.activations import Forward, update_activation_bytes
from mmrlvr.plan.hardware import Hardware
from mmrlvr.plan.memory import plan
from mmrlvr.plan.shape import model_shape

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "geometry_qwen2_5_vl_3b.yaml"
NO_CKPT = "model.gradient_checkpointing=false"  # else neither arm shares prompts


@pytest.fixture(scope="module")
def qwen3b():
    return model_shape("Qwen/Qwen2.5-VL-3B-Instruct")


def test_the_update_is_planned_at_the_packed_tokens(qwen3b):
    # prompt 1,536 tokens (1,280 visual), completion 1,024, group 8, budget 8,192 tokens:
    # padded with prompt_once a row costs 1536 / 8 + 1024 + 1 = 1,217 -> 6 rows, 1 prompt:
    #   1 x 1535 + 6 x 1025 = 7,685 tokens;
    # packed a row costs its real 1536 + 1024 = 2,560 -> 3 rows: 3 x 2560 = 7,680 tokens
    out = {pf: plan(load_config(CONFIG, [NO_CKPT, f"train.padding_free={pf}"]), qwen3b, Hardware(1, 80, "one"))
           for pf in (False, True)}
    assert (out[False]["micro_batch_rows"], out[False]["update_tokens"], out[False]["padding_free"]) == (6, 7685, False)
    assert (out[True]["micro_batch_rows"], out[True]["update_tokens"], out[True]["padding_free"]) == (3, 7680, True)
    f = Forward(rows=3, prompts=1, prompt=1536, completion=1024, dtype="bfloat16", visual_tokens=1280, packed=True)
    assert out[True]["phases"]["update"]["parts_gb"]["activations"] == round(update_activation_bytes(qwen3b, f)["peak"] / 1e9, 2)
    assert out[True]["phases"]["update"]["parts_gb"]["activations"] != out[False]["phases"]["update"]["parts_gb"]["activations"]


def test_packed_parts_by_hand(qwen3b):
    s = qwen3b  # 36 layers, hidden 2,048, 16 heads x 128, intermediate 11,008
    packed = update_activation_bytes(s, Forward(rows=3, prompts=1, prompt=1536, completion=1024, packed=True))
    padded = update_activation_bytes(s, Forward(rows=6, prompts=1, prompt=1536, completion=1024))
    # per layer and token, bf16 with recomputed norms and MLPs: norms 2 x 4 x 2048 = 16,384,
    # attention (2 x 2048 + 2 x 2048) x 2 = 16,384, MLP 2 x 11008 x 2 = 44,032: 76,800 bytes
    assert packed["layers"] == 36 * 7680 * 76_800
    # packed: one (7680 x 7680) mask, boolean + one bf16 additive copy; padded: 6 rows of
    # (1 + 1024) queries x 2,560 keys, the same two copies
    assert packed["mask"] == 7680 * 7680 * (1 + 2) == 176_947_200
    assert padded["mask"] == 6 * 1025 * 2560 * (1 + 2) == 47_232_000
    assert packed["rope"] == 2 * 7680 * 128 * 4  # cos and sin of every packed position
    assert packed["buffered_grads"] == 0 and padded["buffered_grads"] > 0  # no prompt branch to wait for


def test_the_printed_plan_says_the_update_is_packed(capsys):
    assert main(["plan", str(CONFIG), "train.padding_free=true"]) == 0  # the config as shipped: fits
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("update packed (train.padding_free): activations sized by the 7,680 real tokens of its "
                        "rows in one sequence (no prompt shared), with their 7,680 x 7,680 attention mask")
    assert main(["plan", str(CONFIG)]) == 0
    assert "packed" not in capsys.readouterr().out
