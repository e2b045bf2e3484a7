"""A policy under DeepSpeed ZeRO-3 cannot be copied into a vLLM engine or a rollout server: its
parameters are partitioned placeholders the weight sync does not gather. One line, before any engine
is built; the HF engine, which samples from the policy itself, is unaffected."""

import pytest
import torch

from mmrlvr.config import Config, ConfigError, RolloutConfig
from mmrlvr.models.load import load_policy
from mmrlvr.rollout.factory import make_engine
from mmrlvr.rollout.hf import HFRolloutEngine


def _partitioned(model):
    """Mark the parameters as ZeRO-3 does (`ds_id`), with one emptied as its placeholder would be."""
    for i, p in enumerate(model.parameters()):
        p.ds_id = i
    return model


@pytest.mark.parametrize("engine", ["vllm", "vllm_server"])
def test_zero3_parameters_are_refused_before_an_engine_that_copies_them_is_built(engine):
    model, processor = load_policy("tiny")
    cfg = Config(rollout=RolloutConfig(engine=engine, server_url="http://127.0.0.1:9"))
    with pytest.raises(ConfigError, match=rf"rollout.engine={engine} with DeepSpeed ZeRO-3: .* not handled"):
        make_engine(cfg, _partitioned(model), processor)  # no vLLM import, no connection attempted first


def test_the_hf_engine_and_unpartitioned_policies_are_not_refused():
    model, processor = load_policy("tiny")
    assert isinstance(make_engine(Config(), _partitioned(model), processor), HFRolloutEngine)
    plain, processor = load_policy("tiny")
    with torch.no_grad():  # an unpartitioned policy gets past the check (and then fails to connect: port 9)
        with pytest.raises(Exception) as err:
            make_engine(Config(rollout=RolloutConfig(engine="vllm_server", server_url="http://127.0.0.1:9")), plain,
                        processor)
    assert "ZeRO-3" not in str(err.value)
