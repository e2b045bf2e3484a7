"""A weight broadcast that breaks mid-way leaves the server's workers partly loaded (they load each
bucket as it arrives, never holding a second copy): the server then refuses generations in one
line until a sync completes, and its version does not move for the broken one.

The service is driven directly (`server_app.RolloutService`) over an engine whose workers fail the
receive, as a trainer dying mid-broadcast makes them; no vLLM here (the broadcast itself runs in
`test_vllm_server.py` and `test_vllm_server_parallel.py`)."""

from __future__ import annotations

import pytest
import torch

from mmrlvr.rollout.server_app import RolloutService


class BreakingEngine:
    """What the service reads of the engine; the channel receive raises while `breaks` is set."""

    allowed_ids, suppress_ids = list(range(10)), [10]

    def __init__(self):
        self.breaks, self.llm, self.ran, self.loaded = True, self, 0, 0

    def collective_rpc(self, name, args=()):
        if name == "mmrlvr_channel_receive" and self.breaks:
            raise RuntimeError("Connection closed by peer")
        return [None]

    def _wake(self):
        pass

    def reset_caches(self):
        pass

    def load_pairs(self, pairs):
        self.loaded += len(list(pairs))

    def params_from_fields(self, fields):
        return fields

    def generate_raw(self, prompts, params):
        self.ran += 1
        return [[] for _ in prompts]


def test_a_broken_broadcast_stops_generation_until_a_sync_completes(tmp_path):
    from safetensors.torch import save_file

    engine = BreakingEngine()
    service = RolloutService(engine, "tiny", "float32")
    request = {"requests": [{"prompt": "p"}], "sampling": [{"n": 1, "max_tokens": 4, "seed": 0}]}
    assert service.generate(request)["version"] == 0 and engine.ran == 1
    with pytest.raises(RuntimeError, match="Connection closed"):
        service.update_from_channel({"spec": [["w", "float32", [2]]]})
    assert service.version == 0
    with pytest.raises(ValueError, match="a weight broadcast broke mid-way and left this server's weights partly loaded"):
        service.generate(request)
    assert engine.ran == 1  # nothing generated from the mixed weights
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert service.update_from_dir(str(tmp_path)) == {"version": 1}  # a whole sync by file
    assert service.generate(request)["version"] == 1 and engine.ran == 2
    engine.breaks = True
    with pytest.raises(RuntimeError):
        service.update_from_channel({"spec": [["w", "float32", [2]]]})
    engine.breaks = False
    assert service.update_from_channel({"spec": [["w", "float32", [2]]]}) == {"version": 2}  # a whole broadcast
    assert service.generate(request)["version"] == 2
