"""The forward's memory options travel as one record: read from `train.*` field by field, and a
single keyword to `completion_logprobs` overrides only its own field."""

import dataclasses

from mmrlvr.config import load_config
from mmrlvr.models.patches.options import PLAIN, ForwardOptions


def test_the_record_reads_each_train_flag_into_its_own_field():
    cfg = load_config("configs/quickstart.yaml", ["train.prompt_once=true", "train.chunked_head=false",
                                                  "train.recompute_mlp=true", "train.mask_once=false",
                                                  "train.recompute_norm=true", "train.padding_free=false"])
    assert ForwardOptions.of(cfg.train) == ForwardOptions(prompt_once=True, chunked_head=False, recompute_mlp=True,
                                                          mask_once=False, recompute_norm=True, padding_free=False)
    cfg = load_config("configs/quickstart.yaml", ["train.prompt_once=false", "train.chunked_head=true",
                                                  "train.recompute_mlp=false", "train.mask_once=true",
                                                  "train.recompute_norm=false", "train.padding_free=true"])
    assert dataclasses.astuple(ForwardOptions.of(cfg.train)) == (False, True, False, True, False, True)
    assert dataclasses.astuple(PLAIN) == (False,) * 6


def test_a_keyword_overrides_its_own_option_only(monkeypatch):
    from mmrlvr.train import logprobs

    seen = []
    monkeypatch.setattr(logprobs, "recomputed_gated_mlps", lambda m, on: (seen.append(("mlp", on)), _null())[1])
    monkeypatch.setattr(logprobs, "masks_once", lambda m, on: (seen.append(("mask", on)), _null())[1])
    monkeypatch.setattr(logprobs, "recomputed_rms_norms", lambda m, on: (seen.append(("norm", on)), _null())[1])
    monkeypatch.setattr(logprobs, "_joined_logits", _stop)
    opts = ForwardOptions(recompute_mlp=True, mask_once=False, recompute_norm=True)
    import pytest
    import torch

    with pytest.raises(_Forward):
        logprobs.completion_logprobs(torch.nn.Linear(1, 1), {}, torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2),
                                     options=opts, mask_once=True)
    assert seen == [("mlp", True), ("mask", True), ("norm", True)]


def _null():
    import contextlib

    return contextlib.nullcontext()


class _Forward(Exception):
    """Raised where the forward would run: the patches entered so far are what the test reads."""


def _stop(*a):
    raise _Forward()
