"""Every field of `Run` names a real type (no `Any`), and each name resolves to the class the run
builds: a reader of the step sees what `run.source` or `run.methods` is without opening the loop."""

import dataclasses
import typing

from accelerate import Accelerator
from transformers import ProcessorMixin

from mmrlvr.data.feed import MediaStream
from mmrlvr.rollout.lagged import Lookahead
from mmrlvr.recipe import run as run_module
from mmrlvr.methods.hooks import Live
from mmrlvr.verifiers.pool import VerifierPool
from mmrlvr.verifiers.score import InProcessScorer


def test_every_run_field_names_a_type_that_resolves():
    names = {"Accelerator": Accelerator, "ProcessorMixin": ProcessorMixin, "MediaStream": MediaStream,
             "Lookahead": Lookahead, "VerifierPool": VerifierPool,
             "InProcessScorer": InProcessScorer}
    hints = typing.get_type_hints(run_module.Run, globalns={**vars(run_module), **names})
    fields = [f.name for f in dataclasses.fields(run_module.Run)]
    assert [f for f in fields if hints[f] is typing.Any] == []
    assert hints["source"] == MediaStream | Lookahead and hints["scorer"] == VerifierPool | InProcessScorer
    assert hints["methods"] is Live and hints["accelerator"] is Accelerator
