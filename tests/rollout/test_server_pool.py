"""Several rollout servers behind one engine (`rollout.server_url` a list), in the main environment: stand-in
servers (stdlib HTTP, `test_server_client.StandIn`) answer as `mmrlvr rollout-server` would. Whole groups are
spread by expected tokens and come back in order, with the seeds one server would use; each update reaches
each server once; versions that disagree, an unreachable server and one that dies mid-run are one line."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from mmrlvr.config import RolloutConfig
from mmrlvr.rollout.server_http import RolloutServerError
from mmrlvr.rollout.server_pool import ServerPool, expected_tokens, spread
from mmrlvr.rollout.vllm_inputs import SEED_STRIDE
from mmrlvr.types import Sample
from tests.rollout.conftest import main_env_only
from tests.rollout.test_server_client import KEY, ROOT, _engine, _info, _tokens, stand_in  # noqa: F401 - a fixture

SHORT = ["One?", "Two?", "Three?"]
LONG = "Count the shapes in this picture and say how many there are, one word only. " * 8


def _sample(sid: str, text: str) -> Sample:
    return Sample(sid, ({"role": "user", "content": [{"type": "text", "text": text}]},), 0)


def _pool(urls, tiny, **kw) -> ServerPool:
    model, processor = tiny
    return ServerPool.connect(urls, processor, model.config, **{"key": KEY, **kw})


def _seed_echo(tiny):
    """A completion's tokens spell its seed's offset in the step (prompt i, sample j of G: i*G + j), then end."""
    tok = tiny[1].tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    return lambda s: [*tok.encode(str(s % SEED_STRIDE), add_special_tokens=False), end]


def _prompts(server) -> list[str]:
    """The prompts' own words each /generate body carried (the chat template around them dropped)."""
    found = []
    for body in server.generated:
        for r in body["requests"]:
            found.append(next(t for t in [LONG.strip(), *SHORT] if t in r["prompt"]))
    return found


# ------------------------------------------------------------------------------ spread, by hand
def test_expected_tokens_are_the_prompt_and_the_most_its_group_adds():
    # prompts of 5 and 7 tokens, 4 new tokens each for G=3 completions: 5 + 12, 7 + 12
    assert expected_tokens([5, 7], 4, 3) == [17, 19]


def test_whole_prompts_go_heaviest_first_to_the_least_loaded_server():
    # costs 10 50 30 20 40 on two servers: 50 -> A (50), 40 -> B (40), 30 -> B (70), 20 -> A (70),
    # 10 -> A (a tie at 70: the server listed first); each server's prompts in the batch's order
    assert spread([10, 50, 30, 20, 40], 2) == [[0, 1, 3], [2, 4]]
    # three: 50 -> A, 40 -> B, 30 -> C, 20 -> C (the least, 30: now 50), 10 -> B (40: now 50)
    assert spread([10, 50, 30, 20, 40], 3) == [[1], [0, 4], [2, 3]]
    assert spread([7], 3) == [[0], [], []]  # fewer prompts than servers: the others are not asked


def test_each_rank_breaks_ties_from_its_own_server():
    """Two ranks with one prompt each: rank 0's goes to server 0 and rank 1's to server 1 (not both to
    server 0); loads still decide first, and a rank past the server count wraps around."""
    assert spread([7], 2, first=0) == [[0], []] and spread([7], 2, first=1) == [[], [0]]
    assert spread([10, 50, 30, 20, 40], 2, first=1) == [[2, 4], [0, 1, 3]]  # the same split, mirrored
    assert spread([5, 5, 5], 2, first=3) == [[1], [0, 2]]  # rank 3 of 2 servers starts at server 1


# ------------------------------------------------------------------------------ the pool, on stand-ins
def test_groups_are_spread_by_expected_tokens_and_come_back_in_order(stand_in, tiny):
    a, b = stand_in(), stand_in()
    for s in (a, b):
        s.tokens_for = _seed_echo(tiny)
    samples = [_sample("s0", SHORT[0]), _sample("long", LONG), _sample("s1", SHORT[1]), _sample("s2", SHORT[2])]
    out = _pool([a.url, b.url], tiny).rollout(samples, 2, RolloutConfig(max_new_tokens=4), seed=1, return_logprobs=True)
    # the long prompt (~130 tokens + 4 x 2) outweighs the three short ones (~20 + 8 each) together:
    # it goes to A alone, the three short ones to B, each body in the batch's order, with whole groups (n = G)
    assert _prompts(a) == [LONG.strip()] and _prompts(b) == SHORT
    assert [f["n"] for s in (a, b) for body in s.generated for f in body["sampling"]] == [2, 2, 2, 2]
    # back in the prompts' order: prompt i, sample j carries seed offset i*2 + j
    assert [c.text for c in out.completions] == [str(k) for k in range(8)]
    assert [c.sample_index for c in out.completions] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert out.sampler_logprobs.shape[0] == 8 and out.policy_version == 0


def test_the_seeds_are_those_one_server_uses_so_the_completions_equal_its(stand_in, tiny):
    one, a, b = stand_in(), stand_in(), stand_in()
    for s in (one, a, b):
        s.tokens_for = _seed_echo(tiny)
    samples = [_sample("long", LONG), *(_sample(f"s{i}", t) for i, t in enumerate(SHORT))]
    sampling = RolloutConfig(max_new_tokens=4)
    alone = _engine(one.url, tiny).rollout(samples, 3, sampling, seed=7, return_logprobs=True)
    pooled = _pool([a.url, b.url], tiny).rollout(samples, 3, sampling, seed=7, return_logprobs=True)
    seeds = [f["seed"] for f in one.generated[0]["sampling"]]
    assert seeds == [7 * SEED_STRIDE + i * 3 for i in range(4)]  # `request_seeds`: prompt i of the step
    by_prompt = {p: f["seed"] for s in (a, b) for body in s.generated for p, f in zip(_prompts_of(body), body["sampling"])}
    assert by_prompt == {LONG.strip(): seeds[0], SHORT[0]: seeds[1], SHORT[1]: seeds[2], SHORT[2]: seeds[3]}
    assert pooled.completion_ids.tolist() == alone.completion_ids.tolist()
    assert [c.text for c in pooled.completions] == [c.text for c in alone.completions]
    assert pooled.prompt_inputs["input_ids"].tolist() == alone.prompt_inputs["input_ids"].tolist()


def _prompts_of(body) -> list[str]:
    return [next(t for t in [LONG.strip(), *SHORT] if t in r["prompt"]) for r in body["requests"]]


def test_servers_are_asked_at_once(stand_in, tiny):
    a, b = stand_in(mode="slow"), stand_in(mode="slow")  # each answers /generate after 3 s
    pool = _pool([a.url, b.url], tiny, timeout=10)
    t0 = time.monotonic()
    out = pool.rollout([_sample("a", SHORT[0]), _sample("b", SHORT[1])], 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert time.monotonic() - t0 < 5.5  # one after the other would take 6 s
    assert len(out.completions) == 4 and len(a.generated) == len(b.generated) == 1


def test_each_update_reaches_each_server_exactly_once(stand_in, tiny):
    a, b = stand_in(), stand_in()
    a.version = 3  # restarted servers count from 0, a kept one from where it was: each is counted from its own
    pool = _pool([a.url, b.url], tiny)
    for k in (1, 2):
        pool.sync_weights(tiny[0])
        assert a.calls.count("/update_weights") == b.calls.count("/update_weights") == k
        assert (a.version, b.version) == (3 + k, k) and pool.version == pool.synced_version == 3 + k
    out = pool.rollout([_sample("a", SHORT[0]), _sample("b", SHORT[1])], 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert out.policy_version == 5


def test_servers_that_disagree_on_the_version_stop_the_run_with_one_line(stand_in, tiny, monkeypatch):
    import mmrlvr.rollout.server_pool as pool_mod

    a, b = stand_in(), stand_in()
    pool = _pool([a.url, b.url], tiny)
    monkeypatch.setattr(pool_mod, "_rank_world", lambda: (1, 1))  # a rank that does not sync: it reads the versions
    a.version = 1  # the syncing rank's update reached A, not B
    with pytest.raises(RolloutServerError) as err:
        pool.sync_weights(tiny[0])
    assert str(err.value) == (f"rollout servers disagree on the policy version ({a.url} at 1 (+1), {b.url} at 0 (+0) "
                              "since this run connected): one missed an update or another client loaded weights; "
                              "restart them and resume from the last checkpoint")
    assert a.calls.count("/update_weights") == b.calls.count("/update_weights") == 0  # only rank 0 sends


def test_a_version_moved_on_one_server_is_one_line_naming_it(stand_in, tiny):
    a, b = stand_in(), stand_in()
    pool = _pool([a.url, b.url], tiny)
    pool.sync_weights(tiny[0])
    b.version += 1  # another client loaded weights into B
    with pytest.raises(RolloutServerError) as err:
        pool.rollout([_sample("a", SHORT[0]), _sample("b", SHORT[1])], 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert str(err.value) == (f"rollout server {b.url}: its policy version is 2 where this trainer's syncs make it 1: "
                              "another client loaded weights into it; give each run its own server (and key)")


def test_servers_with_other_settings_than_each_other_are_refused_on_connect(stand_in, tiny):
    a, b = stand_in(), stand_in()
    b.info = {**b.info, "max_model_len": 2048}
    with pytest.raises(RolloutServerError) as err:
        _pool([a.url, b.url], tiny)
    assert str(err.value) == (f"rollout servers {a.url} and {b.url} sample with other settings (max_model_len: None vs "
                              "2048): start every server with the training config's model.* values")
    # and before the model loads: the start-up check compares the servers' GET /info with each other
    from mmrlvr.config import Config
    from mmrlvr.checks.validate import config_errors

    cfg = Config(rollout=RolloutConfig(engine="vllm_server", server_url=[a.url, b.url], server_key=KEY))
    assert [e for e in config_errors(cfg) if e.startswith("rollout.")] == [
        f"rollout.server_url[1]={b.url!r}: samples with other settings than rollout.server_url[0] (max_model_len: None "
        "vs 2048): start every server with the training config's model.* values"]
    b.info = {**b.info, "max_model_len": None}
    assert [e for e in config_errors(cfg) if e.startswith("rollout.")] == []


def test_a_server_gone_from_the_pool_is_one_line_naming_it(stand_in, tiny):
    a, b = stand_in(), stand_in(mode="slow")
    pool = _pool([a.url, b.url], tiny, timeout=30)
    a.stop()
    t0 = time.monotonic()
    with pytest.raises(RolloutServerError) as err:  # told at once, not after B's answer
        pool.rollout([_sample("a", SHORT[0]), _sample("b", SHORT[1])], 2, RolloutConfig(max_new_tokens=4), seed=1)
    assert time.monotonic() - t0 < 2.5
    assert str(err.value) == f"rollout server {a.url}: POST /generate failed (connection refused)"


# ------------------------------------------------------------------------------ whole runs
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(args, tmp_path, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MMRLVR_ROLLOUT_KEY": KEY}
    return subprocess.run([sys.executable, "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_an_unreachable_server_in_the_list_is_one_line_naming_it_within_a_minute(stand_in, tmp_path):
    good = stand_in()
    dead = f"http://127.0.0.1:{_closed_port()}"  # nothing listens there
    run = tmp_path / "run"
    t0 = time.monotonic()
    proc = _train(["rollout.engine=vllm_server", f"rollout.server_url=[{good.url},{dead}]", f"output_dir={run}"],
                  tmp_path, timeout=120)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mmrlvr: error:")]
    assert errors == [f"mmrlvr: error: rollout.server_url[1]={dead!r}: expected a running rollout server "
                      "(GET /health: connection refused); start one with `mmrlvr rollout-server --model DIR --port N`"]
    assert "Traceback" not in proc.stderr and not run.exists()


@main_env_only
def test_a_server_of_the_pool_dying_mid_run_stops_training_with_one_line_and_an_intact_checkpoint(stand_in, tmp_path):
    from mmrlvr.models.load import load_policy

    model, processor = load_policy("tiny")
    live, dying = stand_in(), stand_in(stop_after_syncs=2)  # the initial sync and step 1's; step 2 finds it gone
    for s in (live, dying):
        s.info, s.tokens = _info(model, processor), _tokens(processor)
    run = tmp_path / "run"
    proc = _train(["model.dtype=float32", "rollout.engine=vllm_server", f"rollout.server_url=[{live.url},{dying.url}]",
                   "warm_start.steps=0", "train.steps=3", "train.save_every=1", "task.eval_size=4",
                   "rollout.prompts_per_step=2", "rollout.group_size=2", f"output_dir={run}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mmrlvr: error:")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert re.fullmatch(rf"mmrlvr: error: rollout server {dying.url}: POST /(generate|update_weights) failed "
                        r"\((connection refused|connection lost: the server went away)\)", errors[0]), errors
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1"]  # saved whole, nothing half-written
    assert live.calls.count("/update_weights") == 2  # each update reached the live server once


# ------------------------------------------------------------------------------ the setting
def test_a_list_from_yaml_or_an_override_is_checked_entry_by_entry_and_duplicates_are_refused(stand_in, tmp_path):
    from mmrlvr.config import load_config
    from mmrlvr.checks.validate import config_errors

    good = stand_in()
    port = good.url.rsplit(":", 1)[1]
    (tmp_path / "c.yaml").write_text(f"rollout:\n  engine: vllm_server\n  server_key: {KEY}\n"
                                     f"  server_url:\n    - {good.url}\n    - http://LOCALHOST:{port}/\n")
    by_yaml = load_config(tmp_path / "c.yaml")
    by_override = load_config(tmp_path / "c.yaml", [f"rollout.server_url=[{good.url},http://127.0.0.1:{port}/,ftp://x]"])
    assert by_override.rollout.server_url == [good.url, f"http://127.0.0.1:{port}/", "ftp://x"]
    lines = lambda cfg: [e for e in config_errors(cfg) if e.startswith("rollout.")]  # noqa: E731
    assert lines(by_yaml) == [  # another spelling of the same host and port: one server
        f"rollout.server_url[1]='http://LOCALHOST:{port}/': the same server as rollout.server_url[0]: list each server once"]
    assert lines(by_override) == [
        f"rollout.server_url[1]='http://127.0.0.1:{port}/': the same server as rollout.server_url[0]: list each server once",
        "rollout.server_url[2]='ftp://x': expected an address such as http://127.0.0.1:8000 (scheme http or https, a host)"]
    for bad, why in (([], "rollout.server_url=[]: expected the rollout server's address, e.g. http://127.0.0.1:8000 "
                          "(or a list of them) (start one with `mmrlvr rollout-server --model DIR --port 8000`)"),
                     ([good.url, 5], f"rollout.server_url=['{good.url}', 5]: expected an address such as "
                                     "http://127.0.0.1:8000, or a list of addresses (or null)")):
        by_override.rollout.server_url = bad
        assert lines(by_override) == [why]


@main_env_only
def test_two_training_processes_share_two_servers_and_each_update_reaches_each_once(stand_in, tmp_path):
    """torchrun, gloo, one step off-policy: every rank sends its own prompts to the pool; rank 0 alone
    syncs, so each server loads each update once (the first sync and one per step), never once per rank."""
    import json

    from mmrlvr.models.load import load_policy

    model, processor = load_policy("tiny")
    a, b = stand_in(), stand_in()
    for s in (a, b):
        s.info, s.tokens = _info(model, processor), _tokens(processor)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "MMRLVR_ROLLOUT_KEY": KEY}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                           "-m", "mmrlvr.cli", "train", "configs/quickstart.yaml", "model.dtype=float32",
                           "rollout.engine=vllm_server", f"rollout.server_url=[{a.url},{b.url}]", "rollout.async_steps=1",
                           "warm_start.steps=0", "train.steps=2", "task.eval_size=4", "rollout.prompts_per_step=4",
                           "rollout.group_size=2", f"output_dir={run}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert a.calls.count("/update_weights") == b.calls.count("/update_weights") == 3  # the first sync + 2 steps
    assert a.version == b.version == 3
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r.get("rollout/staleness") for r in rows if "reward/mean" in r] == [0, 1]  # one step off-policy
    assert a.generated and b.generated  # both servers sampled
