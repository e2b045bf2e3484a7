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
from mmrlvr.rollout.server_key import authorized
from mmrlvr.rollout.vllm_inputs import processor_kwargs
from mmrlvr.types import Sample

ROOT = Path(__file__).resolve().parents[2]
KEY = "stand-in-key"


class StandIn:
    """A rollout server's HTTP answers without vLLM: every completion is `tokens` with log-prob -0.5.

    `mode`: "ok", "short" (one completion too few), "nan" (a NaN log-prob), "slow" (answers after 3 s),
    "dribble" (sends its answer a byte every 0.5 s); `stop_after_syncs`: stop listening once that many
    weight updates arrived. Every POST needs `key` (the server's own check, `server_key.authorized`);
    `answer` (a function of the output list) rewrites what /generate returns."""

    def __init__(self, info: dict, tokens: list[int], mode: str = "ok", stop_after_syncs: int | None = None,
                 key: str = KEY):
        self.info, self.tokens, self.mode, self.stop_after, self.key = info, tokens, mode, stop_after_syncs, key
        self.answer = None
        self.tokens_for = None  # a function of a completion's seed (its request's + j): its token ids instead of `tokens`
        self.generated: list[dict] = []  # the /generate bodies received
        self.channel_port = None
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
                if not authorized(self.headers.get("Authorization"), outer.key):
                    self._send({"detail": "missing or wrong key"}, 401)
                    return
                if self.path == "/check_key":
                    self._send({"ok": True})
                    return
                if self.path == "/weight_channel":
                    self._send({"port": outer.channel_port})
                    return
                if self.path == "/update_weights":
                    outer.version += 1
                    self._send({"version": outer.version})
                    if outer.stop_after is not None and outer.version >= outer.stop_after:
                        outer.dead = True  # before any later request can be served
                        threading.Thread(target=outer.stop).start()
                    return
                if outer.mode == "slow":
                    time.sleep(3)
                outer.generated.append(payload)
                outs = []
                for f in payload["sampling"]:
                    n = f["n"] - (1 if outer.mode == "short" else 0)
                    toks = [outer.tokens if outer.tokens_for is None else outer.tokens_for(f["seed"] + j) for j in range(n)]
                    outs.append([{"token_ids": t, "text": "3", "finish_reason": "stop",
                                  "logprobs": [float("nan") if outer.mode == "nan" else -0.5] * len(t)} for t in toks])
                body = {"outputs": outs, "version": outer.version}
                if outer.answer is not None:
                    body = outer.answer(body)
                if outer.mode == "dribble":  # the status line and headers too, a byte at a time
                    payload = json.dumps(body).encode()
                    data = (f"HTTP/1.0 200 OK\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(0.5)
                    except OSError:  # the client gave up: as it should
                        pass
                    return
                self._send(body)

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
    return ServerRolloutEngine(url, processor, model.config, **{"key": KEY, **kw})


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
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MMRLVR_ROLLOUT_KEY": KEY}
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


# ------------------------------------------------------------------ the key, and what the client trusts
def test_a_trainer_without_the_key_or_with_another_is_refused(stand_in, tiny, monkeypatch):
    from mmrlvr.rollout.server_http import probe_problem

    monkeypatch.delenv("MMRLVR_ROLLOUT_KEY", raising=False)
    s = stand_in()
    for key in (None, "not-the-key"):
        with pytest.raises(RolloutServerError) as err:
            _engine(s.url, tiny, key=key).sync_weights(tiny[0])
        assert str(err.value).startswith(f"rollout server {s.url}: POST /update_weights failed (HTTP 401")
        assert "rollout.server_key or MMRLVR_ROLLOUT_KEY" in str(err.value) and s.version == 0
        assert "refuses this trainer's key" in probe_problem(s.url, key=key)
    monkeypatch.setenv("MMRLVR_ROLLOUT_KEY", KEY)  # the environment variable serves as the key
    assert probe_problem(s.url) is None
    _engine(s.url, tiny, key=None).sync_weights(tiny[0])
    assert s.version == 1


def test_a_version_moved_by_another_writer_stops_the_run(stand_in, tiny):
    s = stand_in()
    engine = _engine(s.url, tiny)
    engine.sync_weights(tiny[0])
    engine.rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    s.version += 1  # another client loaded its weights
    with pytest.raises(RolloutServerError) as err:
        engine.rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert str(err.value) == (f"rollout server {s.url}: its policy version is 2 where this trainer's syncs make it 1: "
                              "another client loaded weights into it; give each run its own server (and key)")
    with pytest.raises(RolloutServerError, match="its policy version is 3 where this trainer's syncs make it 2"):
        engine.sync_weights(tiny[0])  # its own update lands on top of the other's


@pytest.mark.parametrize("version", ["abc", 1e400, -1, True, None])
def test_a_version_that_is_not_a_count_is_one_line(stand_in, tiny, version):
    s = stand_in()
    s.answer = lambda body: {**body, "version": version}
    with pytest.raises(RolloutServerError) as err:
        _engine(s.url, tiny).rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert str(err.value).startswith(f"rollout server {s.url}: malformed /generate answer (version ")
    assert str(err.value).endswith("is not an integer >= 0)")


def test_the_text_scored_is_decoded_from_the_ids_trained_on(stand_in, tiny):
    s = stand_in()
    s.answer = lambda body: {**body, "outputs": [[{**c, "text": "999"} for c in o] for o in body["outputs"]]}
    out = _engine(s.url, tiny).rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert [c.text for c in out.completions] == ["3"] * 4  # the ids say "3" (and <|im_end|>, skipped)
    tok = tiny[1].tokenizer
    s.tokens = [*tok.encode("3", add_special_tokens=False), tok.convert_tokens_to_ids("â")]  # the first byte of 3
    out = _engine(s.url, tiny).rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert [c.text for c in out.completions] == ["3"] * 4  # as vLLM's detokenizer: the incomplete character left out


def test_completions_longer_than_asked_or_with_suppressed_ids_are_one_line(stand_in, tiny):
    from mmrlvr.rollout.hf import vision_token_ids

    s = stand_in()
    with pytest.raises(RolloutServerError) as err:  # two tokens where one was asked for
        _engine(s.url, tiny).rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=1), seed=1)
    assert str(err.value) == (f"rollout server {s.url}: malformed /generate answer "
                              "(prompt 0 completion 0: 2 tokens, more than the 1 new tokens asked for)")
    vision = vision_token_ids(tiny[1].tokenizer, tiny[0].config.model_type)
    s.tokens = [vision[0], vision[0]]
    with pytest.raises(RolloutServerError) as err:
        _engine(s.url, tiny).rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert str(err.value) == (f"rollout server {s.url}: malformed /generate answer (prompt 0 completion 0: "
                              f"suppressed token ids [{vision[0]}] (the sampler never allows them))")


@pytest.mark.parametrize("port", ["abc", -5, 70000, 1.5])
def test_a_weight_channel_port_out_of_range_is_one_line(stand_in, tiny, port):
    s = stand_in()
    s.channel_port = port
    engine = _engine(s.url, tiny, weight_sync="broadcast")
    with pytest.raises(RolloutServerError) as err:
        engine.sync_weights(tiny[0])
    assert str(err.value) == (f"rollout server {s.url}: malformed /weight_channel answer "
                              f"(port {str(port)!r} is not an integer in [1, 65535])")


def test_a_server_dribbling_its_answer_is_stopped_at_the_request_deadline(stand_in, tiny):
    s = stand_in(mode="dribble")  # a byte every 0.5 s: no single read ever waits 2 s
    engine = _engine(s.url, tiny, timeout=2.0)
    t0 = time.monotonic()
    with pytest.raises(RolloutServerError) as err:
        engine.rollout(SAMPLES, 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert time.monotonic() - t0 < 3.5
    assert str(err.value) == f"rollout server {s.url}: POST /generate failed (no answer in time)"


def test_joining_a_store_that_never_speaks_stops_at_the_timeout():
    import socket

    from mmrlvr.rollout.server import _joined_store

    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(RolloutServerError) as err:
            _joined_store("http://127.0.0.1:1", "127.0.0.1", port, 1.5)
        assert time.monotonic() - t0 < 4
    assert str(err.value).startswith(f"rollout server http://127.0.0.1:1: the weight channel's store at 127.0.0.1:{port} "
                                     "cannot be joined (")
