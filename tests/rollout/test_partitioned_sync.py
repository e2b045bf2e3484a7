"""A policy under DeepSpeed ZeRO-3 is synced by gathering its partitioned parameters: the weight channel
cuts buckets by their whole shapes (`ds_shape`) and gathers one bucket at a time, releasing it before the
next. Here with stand-in partitioned parameters and a stand-in `deepspeed.zero.GatheredParameters`
(these tests run everywhere; the real two-process ZeRO-3 run is `test_zero3_sync.py`, when deepspeed is
installed). What stays refused, in one line before any engine is built: ZeRO-3 with a LoRA adapter
(peft merges it into the placeholders); the HF engine, which samples from the policy itself, never is.

Buckets by hand, a 100-byte limit, float32: a [4, 4] (64 B) + a [8] (32 B) = 96 B; a [3, 5] (60 B) + a
[10] (40 B) = 100 B; a plain (unpartitioned) [5] buffer (20 B) alone, since 100 + 20 > 100."""

import sys
import types

import pytest
import torch

from mmrlvr.config import Config, ConfigError, RolloutConfig
from mmrlvr.models.load import load_policy
from mmrlvr.rollout import weight_channel as wc
from mmrlvr.rollout.factory import make_engine
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.rollout.weight_names import sync_pairs

SHAPES = [(4, 4), (8,), (3, 5), (10,)]


def _partitioned_param(i: int, whole: torch.Tensor) -> torch.nn.Parameter:
    """A parameter as ZeRO-3 leaves it: an empty placeholder, its whole shape in `ds_shape`."""
    p = torch.nn.Parameter(torch.empty(0, dtype=whole.dtype))
    p.ds_id, p.ds_shape, p.whole = i, whole.shape, whole
    return p


class FakeGathered:
    """`deepspeed.zero.GatheredParameters(params, modifier_rank=None)`: fills each placeholder with its
    whole data inside the `with`, empties it on exit; records each gather's ds_ids and the bytes gathered."""

    log: list = []
    every: list = []  # every partitioned parameter, to count the bytes gathered at once

    def __init__(self, params, modifier_rank=None):
        assert modifier_rank is None  # read-only: nothing is broadcast back
        self.params = list(params)

    def __enter__(self):
        for p in self.params:
            p.data = p.whole.clone()
        held = sum(p.data.numel() * p.data.element_size() for p in self.every)
        FakeGathered.log.append(([p.ds_id for p in self.params], held))

    def __exit__(self, *exc):
        for p in self.params:
            p.data = torch.empty(0, dtype=p.whole.dtype)


class Broadcasts:
    """A group that records what each broadcast carries."""

    def __init__(self):
        self.sent: list[bytes] = []

    def broadcast(self, flat, src):
        assert src == wc.CLIENT_RANK
        self.sent.append(flat.numpy().tobytes())
        return types.SimpleNamespace(wait=lambda: None)


@pytest.fixture
def fake_deepspeed(monkeypatch):
    ds = types.ModuleType("deepspeed")
    ds.zero = types.SimpleNamespace(GatheredParameters=FakeGathered)
    monkeypatch.setitem(sys.modules, "deepspeed", ds)
    FakeGathered.log = []
    return FakeGathered


def test_a_partitioned_policy_is_sent_one_gathered_bucket_at_a_time(fake_deepspeed):
    wholes = [torch.arange(torch.Size(s).numel(), dtype=torch.float32).reshape(s) + 100 * i for i, s in enumerate(SHAPES)]
    params = [_partitioned_param(i, w) for i, w in enumerate(wholes)]
    buffer = torch.full((5,), 7.0)
    fake_deepspeed.every = params
    pairs = [(f"w{i}", p) for i, p in enumerate(params)] + [("buf", buffer)]
    spec = wc.spec_of(pairs)
    assert spec == [["w0", "float32", [4, 4]], ["w1", "float32", [8]], ["w2", "float32", [3, 5]],
                    ["w3", "float32", [10]], ["buf", "float32", [5]]]  # whole shapes, not the placeholders'
    assert wc.buckets(spec, 100) == [[0, 1], [2, 3], [4]]
    group = Broadcasts()
    wc.send(group, pairs, 100)
    # two gathers, one per bucket of partitioned parameters, each holding only its own bucket (96 and 100
    # bytes: the first released before the second); the plain buffer needs none
    assert fake_deepspeed.log == [([0, 1], 96), ([2, 3], 100)]
    assert [len(b) for b in group.sent] == [96, 100, 20]
    assert b"".join(group.sent) == b"".join(t.numpy().tobytes() for t in [*wholes, buffer])
    assert all(p.numel() == 0 for p in params)  # every placeholder is partitioned again


def test_ranks_outside_the_channel_join_the_same_gathers(fake_deepspeed):
    params = [_partitioned_param(i, torch.ones(s)) for i, s in enumerate(SHAPES)]
    fake_deepspeed.every = params
    wc.send(None, [(f"w{i}", p) for i, p in enumerate(params)], 100)
    assert [ids for ids, _ in fake_deepspeed.log] == [[0, 1], [2, 3]]


def test_a_tied_parameter_is_gathered_once_per_bucket(fake_deepspeed):
    p = _partitioned_param(0, torch.ones(4, 4))
    fake_deepspeed.every = [p]
    group = Broadcasts()
    wc.send(group, [("embed", p), ("lm_head", p)], 200)  # one bucket of 128 bytes, the parameter under two names
    assert fake_deepspeed.log == [([0], 64)] and [len(b) for b in group.sent] == [128]


def test_reading_a_partitioned_parameter_outside_its_gather_fails_loudly(monkeypatch, fake_deepspeed):
    p = _partitioned_param(3, torch.ones(2, 2))
    monkeypatch.setattr(wc, "gathered", lambda tensors: __import__("contextlib").nullcontext())
    with pytest.raises(RuntimeError, match=r"ZeRO-3 parameter 3 read outside its gather \(shape \[0\]\)"):
        wc.send(None, [("w", p)], 100)


def test_sync_pairs_keep_partitioned_parameters_or_gather_each_alone(fake_deepspeed):
    lin = torch.nn.Linear(2, 3)
    wholes = {"weight": lin.weight.detach().clone(), "bias": lin.bias.detach().clone()}
    for i, (n, w) in enumerate(wholes.items()):
        setattr(lin, n, _partitioned_param(i, w))
    fake_deepspeed.every = [lin.weight, lin.bias]
    kept = sync_pairs(lin, gather=False)
    assert [n for n, _ in kept] == ["weight", "bias"] and kept[0][1] is lin.weight  # the Parameter, ds_id and all
    assert fake_deepspeed.log == []
    whole = sync_pairs(lin)
    assert fake_deepspeed.log == [([0], 24), ([1], 12)]  # one parameter at a time
    assert all(torch.equal(t, wholes[n]) for n, t in whole) and lin.weight.numel() == 0


def _marked(model):
    """Mark the parameters as ZeRO-3 does (`ds_id`)."""
    for i, p in enumerate(model.parameters()):
        p.ds_id = i
    return model


@pytest.mark.parametrize("engine", ["vllm", "vllm_server"])
def test_zero3_with_a_lora_adapter_is_refused_before_an_engine_that_copies_it_is_built(engine):
    from peft import LoraConfig, get_peft_model

    model, processor = load_policy("tiny")
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    cfg = Config(rollout=RolloutConfig(engine=engine, server_url="http://127.0.0.1:9"))
    with pytest.raises(ConfigError, match=rf"rollout.engine={engine} with DeepSpeed ZeRO-3 and a LoRA adapter: "
                                          r".* not handled"):
        make_engine(cfg, _marked(lora), processor)  # no vLLM import, no connection attempted first


def test_the_hf_engine_and_zero3_without_an_adapter_are_not_refused():
    model, processor = load_policy("tiny")
    assert isinstance(make_engine(Config(), _marked(model), processor), HFRolloutEngine)
    with pytest.raises(Exception) as err:  # past the check, then no server to connect to (port 9)
        make_engine(Config(rollout=RolloutConfig(engine="vllm_server", server_url="http://127.0.0.1:9")), model,
                    processor)
    assert "ZeRO-3" not in str(err.value)
