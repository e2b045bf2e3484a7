"""The rollout server's device layout (`--tensor-parallel-size N --data-parallel-size M`), refused in
one line with exit code 2 before the model loads (no vLLM here: the refusal comes before the
check for it); the layout's own pieces: CUDA_VISIBLE_DEVICES cut per replica, requests cut into
whole runs per replica, vLLM's CPU thread binding per worker."""

from __future__ import annotations

import pytest

from mmrlvr.cli import main
from mmrlvr.rollout.server_layout import cpu_thread_binding, layout_problem
from mmrlvr.rollout.server_replicas import device_slice, split_evenly

# the tiny model's head counts: 4 query heads, 2 key/value heads, 4 vision heads
TINY = {"text_config": {"num_attention_heads": 4, "num_key_value_heads": 2}, "vision_config": {"num_heads": 4}}


@pytest.mark.parametrize("flags, line", [
    (["--tensor-parallel-size", "3"],
     "--tensor-parallel-size=3: the model's num_attention_heads=4 does not divide into 3 shards (choose a divisor of 4)"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size=0: expected a whole number of devices, at least 1"),
    (["--data-parallel-size", "-2"], "--data-parallel-size=-2: expected a whole number of devices, at least 1"),
    (["--weight-bucket-mb", "4096"], "--weight-bucket-mb=4096: a weight bucket must hold 1 to 2048 MiB, got 4096 MiB"),
])
def test_a_layout_vllm_cannot_serve_is_one_line_and_exit_2(flags, line, capsys):
    assert main(["rollout-server", "--model", "tiny", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"mmrlvr: error: rollout-server: {line}"]


def test_heads_and_devices_decide_the_layout():
    assert layout_problem(TINY, 2, 1) is None and layout_problem(TINY, 4, 2) is None  # kv heads 2: replicated at N=4
    assert "num_key_value_heads=2" in layout_problem({"text_config": {"num_attention_heads": 6, "num_key_value_heads": 2}}, 3, 1)
    assert "vision_config.num_heads=4" in layout_problem({**TINY, "text_config": {"num_attention_heads": 8}}, 8, 1)
    assert layout_problem(TINY, 2, 2, visible_devices="0,1,2,3") is None
    assert layout_problem(TINY, 2, 2, visible_devices="0,1,2") == (
        "--tensor-parallel-size=2 x --data-parallel-size=2 needs 4 devices; CUDA_VISIBLE_DEVICES=0,1,2 holds 3")


def test_replicas_take_their_devices_in_order_and_whole_requests():
    assert [device_slice("4,5,6,7", k, 2) for k in (0, 1)] == ["4,5", "6,7"]
    assert device_slice(None, 1, 2) is None
    with pytest.raises(ValueError, match="replica 1 needs devices 2..3"):
        device_slice("0,1,2", 1, 2)
    assert split_evenly(5, 2) == [(0, 3), (3, 5)] and split_evenly(1, 3) == [(0, 1), (1, 1), (1, 1)]


def test_cpu_workers_are_bound_to_their_own_cores():
    assert cpu_thread_binding(2, [0, 1]) == "0|1"
    assert cpu_thread_binding(2, [0, 1, 2, 3, 4]) == "0,1|2,3"
    assert cpu_thread_binding(3, [0, 1]) == "0|1|1"  # more workers than cores: the last core is shared
