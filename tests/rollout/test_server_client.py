"""The server engine's failure behaviour, in the main environment (no vLLM): a stand-in server (stdlib
HTTP) answers as `mmrlvr rollout-server` would, then misbehaves. Each failure is one line naming
the server and the request, never a hang or a traceback deep in the update."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mmrlvr.config import RolloutConfig
from tests.rollout.conftest import main_env_only
from mmrlvr.rollout.server_http import SERVER_NAME, RolloutServerError
from mmrlvr.rollout.vllm_inputs import processor_kwargs
from mmrlvr.types import Sample

ROOT = Path(__file__).resolve().parents[2]


class StandIn:
    """A rollout server's HTTP answers without vLLM: every completion is `tokens` with log-prob -0.5.

    `mode`: "ok", "short" (one completion too few), "nan" (a NaN log-prob), "slow" (answers after 3 s);
    `stop_after_syncs`: stop listening once that many weight updates arrived."""

    def __init__(self, info: dict, tokens: list[int], mode: str = "ok", stop_after_syncs: int | None = None):
        self.info, self.tokens, self.mode, self.stop_after = info, tokens, mode, stop_after_syncs
        self.version = 0
        self.dead = False
        self.calls: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, obj, code=200):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                outer.calls.append(self.path)
                if self.path == "/health":
                    self._send({"server": SERVER_NAME, "version": outer.version})
                else:
                    self._send({**outer.info, "version": outer.version})

            def do_POST(self):  # noqa: N802
                outer.calls.append(self.path)
                if outer.dead:  # stopped: hang up without an answer, as a dying process does
                    self.close_connection = True
                    return
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                if self.path == "/update_weights":
                    outer.version += 1
                    self._send({"version": outer.version})
                    if outer.stop_after is not None and outer.version >= outer.stop_after:
                        outer.dead = True  # before any later request can be served
                        threading.Thread(target=outer.stop).start()
                    return
                if outer.mode == "slow":
                    time.sleep(3)
                outs = []
                for f in payload["sampling"]:
                    n = f["n"] - (1 if outer.mode == "short" else 0)
                    lp = [float("nan") if outer.mode == "nan" else -0.5] * len(outer.tokens)
                    outs.append([{"token_ids": outer.tokens, "text": "3", "finish_reason": "stop", "logprobs": lp}] * n)
                self._send({"outputs": outs, "version": outer.version})

            def log_message(self, *args):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def _info(model, processor, engine_cls=None) -> dict:
    from mmrlvr.rollout.hf import vision_token_ids

    text = model.config.get_text_config()
    return {"server": SERVER_NAME, "model_type": model.config.model_type, "vocab_size": text.vocab_size,
            "suppress_ids": vision_token_ids(processor.tokenizer, model.config.model_type),
            "processor_kwargs": processor_kwargs(processor), "dtype": "float32"}


def _tokens(processor) -> list[int]:
    tok = processor.tokenizer
    return [*tok.encode("3", add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]


@pytest.fixture
def stand_in(tiny):
    model, processor = tiny
    servers = []

    def make(**kw):
        s = StandIn(_info(model, processor), _tokens(processor), **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        try:
            s.stop()
        except OSError:
            pass


SAMPLES = [Sample("a", ({"role": "user", "content": [{"type": "text", "text": "Count."}]},), 0),
           Sample("b", ({"role": "user", "content": [{"type": "text", "text": "Count again."}]},), 0)]


def _engine(url, tiny, **kw):
    from mmrlvr.rollout.server import ServerRolloutEngine

    model, processor = tiny
    return ServerRolloutEngine(url, processor, model.config, **kw)


def test_a_good_answer_keeps_the_contract(stand_in, tiny):
    s = stand_in()
    out = _engine(s.url, tiny).rollout(SAMPLES, 3, RolloutConfig(max_new_tokens=4), seed=1, return_logprobs=True)
    toks = _tokens(tiny[1])
    assert [c.sample_index for c in out.completions] == [0, 0, 0, 1, 1, 1]
    assert out.completion_ids.tolist() == [toks] * 6 and out.completion_mask.sum().item() == 6 * len(toks)
    assert out.sampler_logprobs.tolist() == [[-0.5] * len(toks)] * 6
    assert out.policy_version == 0 and not any(c.truncated for c in out.completions)


@pytest.mark.parametrize("mode,why", [
    ("short", "malformed /generate answer (prompt 0: expected 3 completions, got 2)"),
    ("nan", "malformed /generate answer (prompt 0 completion 0: log-probs must be finite numbers <= 0)"),
])
def test_malformed_answers_are_one_line(stand_in, tiny, mode, why):
    s = stand_in(mode=mode)
    with pytest.raises(RolloutServerError) as err:
        _engine(s.url, tiny).rollout(SAMPLES, 3, RolloutConfig(max_new_tokens=4), seed=1)
    assert str(err.value) == f"rollout server {s.url}: {why}"


def test_a_request_past_the_timeout_stops_instead_of_hanging(stand_in, tiny):
    s = stand_in(mode="slow")
    engine = _engine(s.url, tiny, timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(RolloutServerError) as err:
        engine.rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert time.monotonic() - t0 < 2.5
    assert str(err.value) == f"rollout server {s.url}: POST /generate failed (no answer in time)"


def test_a_server_that_went_away_is_one_line(stand_in, tiny):
    s = stand_in()
    engine = _engine(s.url, tiny)
    s.stop()
    with pytest.raises(RolloutServerError) as err:
        engine.rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert str(err.value) == f"rollout server {s.url}: POST /generate failed (connection refused)"


def test_a_server_with_other_pixel_limits_is_refused_on_connect(stand_in, tiny):
    s = stand_in()
    s.info = {**s.info, "processor_kwargs": {"images_kwargs": {"size": {"shortest_edge": 1, "longest_edge": 2}}}}
    with pytest.raises(RolloutServerError, match=r"samples from other settings than the learner \(pixel limits: server"):
        _engine(s.url, tiny)


@main_env_only
def test_the_server_dying_mid_run_stops_training_with_one_line_and_an_intact_checkpoint(stand_in, tmp_path):
    from mmrlvr.models.load import load_policy

    s = stand_in(stop_after_syncs=2)  # the initial sync and step 1's; step 2's generation finds no server
    model, processor = load_policy("tiny")
    s.info = _info(model, processor)
    s.tokens = _tokens(processor)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", "model.dtype=float32",
                           "rollout.engine=vllm_server", f"rollout.server_url={s.url}", "warm_start.steps=0",
                           "train.steps=3", "train.save_every=1", "task.eval_size=4", "rollout.prompts_per_step=2",
                           "rollout.group_size=2", f"output_dir={run}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mmrlvr: error:")]
    assert len(errors) == 1, proc.stderr[-2000:]  # refused, or lost if it went away during the request
    assert re.fullmatch(rf"mmrlvr: error: rollout server {s.url}: POST /generate failed "
                        r"\((connection refused|connection lost: the server went away)\)", errors[0]), errors
    assert "Traceback" not in proc.stderr
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["step_1"]  # step 1 saved whole, nothing half-written
    assert (run / "checkpoints" / "step_1" / "trainer_state.pt").exists() or any((run / "checkpoints" / "step_1").iterdir())


def test_media_reach_the_server_pixel_for_pixel():
    """What the client decoded is what the server's processor gets: the same RGB values and frames."""
    import numpy as np
    from PIL import Image

    from mmrlvr.rollout.server_wire import decode_request, encode_request

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (37, 53, 3), dtype=np.uint8))
    frames = rng.integers(0, 255, (4, 28, 56, 3), dtype=np.uint8)
    meta = {"fps": 2.0, "total_num_frames": 12, "frames_indices": [0, 3, 6, 9], "duration": 6.0,
            "video_backend": "mmrlvr", "do_sample_frames": False}
    req = {"prompt": "p", "multi_modal_data": {"image": [image], "video": [(frames, meta)]}}
    back = decode_request(json.loads(json.dumps(encode_request(req))))
    assert back["prompt"] == "p"
    assert np.array_equal(np.asarray(back["multi_modal_data"]["image"][0]), np.asarray(image))
    got_frames, got_meta = back["multi_modal_data"]["video"][0]
    assert np.array_equal(got_frames, frames) and got_meta == meta
    with pytest.raises(ValueError, match="do not fill shape"):
        decode_request({"prompt": "p", "videos": [{"frames": "AAAA", "shape": [1, 2, 2, 3], "meta": {}}]})
