"""Two training ranks and two rollout servers: every rank sends its own prompts (A, what the pool does)
against rank 0 gathering every rank's prompts, sampling them all and scattering the outputs (B).

    python benchmarks/speed/server_ranks.py --repeats 5 --out benchmarks/results/server_ranks.json

The trainer: 2 processes, gloo on 127.0.0.1 (torch.multiprocessing), each loading the tiny policy's
processor. The servers: the client tests' stand-in (`tests/rollout/test_server_client.StandIn`,
standard-library HTTP in this process) answering every completion with `max_new_tokens` tokens after
a delay standing for GPU generation, one request at a time per server (a lock, as `mmrlvr
rollout-server` serves them). Two delay models (`--costs`):

- `tokens`: `--us-per-token` x (prompt tokens + n x max_tokens) of the request: a saturated server,
  where twice the rows take twice the time (what the pool's spread balances);
- `batched`: `--prefill-us` x prompt tokens + `--step-ms` x max_tokens: a server below saturation,
  where a decode step costs the same for 32 rows as for 64 (a GPU's small-batch regime).

A (built): each rank calls `ServerPool.rollout` with its own prompts. B (the alternative, built here):
`gather_object` of the ranks' samples (PIL images, as the client holds and sends them) to rank 0,
one `ServerPool.rollout` with all of them, `scatter_object_list` of each rank's slice of the output
(completions, ids, log-probs and its prompts' processor outputs). Each arm has its own two servers
(identical) so their load is counted apart. Arms interleave (A B, then B A, ...) after one untimed
call each; a call's time is per rank, from a barrier to its output in hand. Prints a markdown table
and writes JSON: per rank medians and ranges, B/A ratios of the slower rank's time paired by repeat,
tokens per server per call, and bytes moved between ranks in B (pickled objects that cross).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))

COSTS = ("tokens", "batched")
PROMPT = "How many red shapes are in this picture? Answer with one number."


# ------------------------------------------------------------------------------ the servers (this process)
class Recorder(list):
    """`StandIn.generated`: keeps the body it is handed for the same thread's `answer` call."""

    def __init__(self, local: threading.local):
        super().__init__()
        self.local = local

    def append(self, payload):
        self.local.payload = payload


class TimedServer:
    """A `StandIn` that answers /generate after its delay model's time, one request at a time."""

    def __init__(self, stand_in, cost: str, tokenizer, image_tokens, args):
        self.s, self.cost, self.tok, self.image_tokens, self.args = stand_in, cost, tokenizer, image_tokens, args
        self.lock = threading.Lock()
        self.local = threading.local()
        self.tokens = 0  # expected tokens of every request answered
        self.requests = 0
        stand_in.generated = Recorder(self.local)
        stand_in.answer = self.answer

    def request_tokens(self, payload) -> tuple[int, int]:
        """(prompt tokens with each image's tokens, tokens its completions may add) of a /generate body."""
        prompt = new = 0
        for req, f in zip(payload["requests"], payload["sampling"]):
            pngs = req.get("images") or []
            prompt += len(self.tok(req["prompt"])["input_ids"]) - len(pngs) + sum(self.image_tokens(p) for p in pngs)
            new += int(f["n"]) * int(f["max_tokens"])
        return prompt, new

    def delay(self, prompt: int, new: int, payload) -> float:
        a = self.args
        if self.cost == "tokens":
            return a.us_per_token * 1e-6 * (prompt + new)
        longest = max((int(f["max_tokens"]) for f in payload["sampling"]), default=0)
        return a.prefill_us * 1e-6 * prompt + a.step_ms * 1e-3 * longest

    def answer(self, body):
        payload = self.local.payload
        prompt, new = self.request_tokens(payload)
        with self.lock:  # the real server: one generation at a time
            time.sleep(self.delay(prompt, new, payload))
            self.tokens += prompt + new
            self.requests += 1
        return body


def image_token_counter(processor):
    """Tokens of an image of a PNG's size, as the processor encodes it (read from the header; cached by size)."""
    import base64
    import io

    from PIL import Image

    cache: dict = {}
    merge = getattr(processor.image_processor, "merge_size", 2) ** 2

    def count(png_b64: str) -> int:
        size = Image.open(io.BytesIO(base64.b64decode(png_b64))).size
        if size not in cache:
            grid = processor.image_processor(images=[Image.new("RGB", size)], return_tensors="pt")["image_grid_thw"]
            cache[size] = int(grid.prod()) // merge
        return cache[size]

    return count


# ------------------------------------------------------------------------------ the ranks
def samples_of(rank: int, n: int, size: int):
    """`n` prompts of one photo-like image each (smooth colour fields with grain: PNGs near a photo's size)."""
    import numpy as np
    from PIL import Image

    from mmrlvr.types import Sample

    out = []
    for i in range(n):
        rng = np.random.default_rng(1000 * rank + i)
        base = Image.fromarray(rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)).resize((size, size), Image.BICUBIC)
        grain = rng.integers(-6, 7, (size, size, 3))
        im = Image.fromarray(np.clip(np.asarray(base, dtype=np.int64) + grain, 0, 255).astype(np.uint8))
        msg = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}
        out.append(Sample(f"r{rank}-{i}", (msg,), 0, images=(im,)))
    return out


def split(out, counts: list[int], group_size: int) -> list:
    """Rank-by-rank slices of one `RolloutOutput` over the ranks' prompts (`counts` prompts each, in order)."""
    from mmrlvr.rollout.base import RolloutOutput

    pi, parts, p0 = out.prompt_inputs, [], 0
    patches = pi["image_grid_thw"].prod(-1).tolist() if "image_grid_thw" in pi else []
    n_images = pi.get("_n_images", [0] * sum(counts))
    for n in counts:
        i0, i1 = sum(n_images[:p0]), sum(n_images[:p0 + n])
        x0, x1 = sum(patches[:i0]), sum(patches[:i1])
        inputs = {}
        for k, v in pi.items():
            if k == "pixel_values":
                inputs[k] = v[x0:x1].clone()
            elif k == "image_grid_thw":
                inputs[k] = v[i0:i1].clone()
            elif k in ("_n_images", "_n_videos"):
                inputs[k] = v[p0:p0 + n]
            elif hasattr(v, "shape") and v.shape[:1] == (len(n_images),):
                inputs[k] = v[p0:p0 + n].clone()
            else:
                inputs[k] = v
        r0, r1 = p0 * group_size, (p0 + n) * group_size
        comps = [dataclasses.replace(c, sample_index=c.sample_index - p0) for c in out.completions[r0:r1]]
        lp = out.sampler_logprobs[r0:r1].clone() if out.sampler_logprobs is not None else None
        parts.append(RolloutOutput(comps, inputs, out.completion_ids[r0:r1].clone(), out.completion_mask[r0:r1].clone(),
                                   lp, out.policy_version))
        p0 += n
    return parts


def gathered_rollout(pool, samples, group_size: int, sampling, seed: int, rank: int, world: int):
    """B: rank 0 gathers every rank's samples, samples them all on the pool, scatters each rank's slice.
    Returns (this rank's output, the objects that crossed between ranks: gathered, scattered)."""
    import torch.distributed as dist

    got = [None] * world if rank == 0 else None
    dist.gather_object(list(samples), got, dst=0)
    parts = None
    if rank == 0:
        flat = [s for part in got for s in part]
        out = pool.rollout(flat, group_size, sampling, seed, return_logprobs=True)
        parts = split(out, [len(p) for p in got], group_size)
    mine = [None]
    dist.scatter_object_list(mine, parts, src=0)
    crossed = (got[1:], parts[1:]) if rank == 0 else None
    return mine[0], crossed


def schedule(costs: list[str], repeats: int) -> list[tuple[int, str, str]]:
    """(repeat, cost, arm): repeat 0 the untimed warm-up; arms A B on even repeats, B A on odd ones."""
    out = []
    for r in range(repeats + 1):
        for cost in costs:
            for arm in (("A", "B") if r % 2 == 0 else ("B", "A")):
                out.append((r, cost, arm))
    return out


def _rank(rank: int, world: int, port: int, urls: dict, key: str, args, results) -> None:
    import torch
    import torch.distributed as dist

    from mmrlvr.config import RolloutConfig
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.server_pool import ServerPool

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model, processor = load_policy("tiny")
    pools = {(c, arm): ServerPool.connect(u, processor, model.config, key=key) for (c, arm), u in urls.items()
             if arm == "A" or rank == 0}
    samples = samples_of(rank, args.prompts_per_rank, args.image_size)
    sampling = RolloutConfig(max_new_tokens=args.max_new_tokens, temperature=1.0)
    rows, moved = [], []
    for step, (r, cost, arm) in enumerate(schedule(args.costs, args.repeats)):
        dist.barrier()
        t0 = time.perf_counter()
        if arm == "A":
            out = pools[(cost, "A")].rollout(samples, args.group_size, sampling, seed=world * step + rank,
                                             return_logprobs=True)
        else:
            out, crossed = gathered_rollout(pools.get((cost, "B")), samples, args.group_size, sampling, step, rank, world)
        seconds = time.perf_counter() - t0
        assert len(out.completions) == len(samples) * args.group_size
        assert out.prompt_inputs["input_ids"].shape[0] == len(samples)
        if arm == "B" and rank == 0 and r > 0:
            moved.append({"cost": cost, "gathered": sum(len(pickle.dumps(x)) for x in crossed[0]),
                          "scattered": sum(len(pickle.dumps(x)) for x in crossed[1])})
        rows.append({"repeat": r, "cost": cost, "arm": arm, "rank": rank, "seconds": seconds})
    every = [None] * world if rank == 0 else None
    dist.gather_object(rows, every, dst=0)
    if rank == 0:
        results.put({"rows": [x for part in every for x in part], "moved": moved})
    dist.barrier()
    dist.destroy_process_group()


# ------------------------------------------------------------------------------ summary
def summarize(rows: list[dict], moved: list[dict], servers: dict, calls: int, costs: list[str]) -> list[dict]:
    """Per cost model and arm: per-rank and slower-rank seconds, B/A paired ratios, load, bytes."""
    timed = [r for r in rows if r["repeat"] > 0]
    out = []
    for cost in costs:
        slow = {}
        for arm in ("A", "B"):
            mine = [r for r in timed if r["cost"] == cost and r["arm"] == arm]
            reps = sorted({r["repeat"] for r in mine})
            slow[arm] = [max(r["seconds"] for r in mine if r["repeat"] == k) for k in reps]
            per_rank = {rk: sorted(r["seconds"] for r in mine if r["rank"] == rk) for rk in sorted({r["rank"] for r in mine})}
            load = [s.tokens / calls for s in servers[(cost, arm)]]
            row = {"cost": cost, "arm": arm, "repeats": len(reps),
                   "rank_median_s": {rk: statistics.median(v) for rk, v in per_rank.items()},
                   "rank_range_s": {rk: [v[0], v[-1]] for rk, v in per_rank.items()},
                   "slower_rank_s": slow[arm], "slower_rank_median_s": statistics.median(slow[arm]),
                   "tokens_per_server_per_call": load, "requests_per_server_per_call": [s.requests / calls for s in servers[(cost, arm)]],
                   "server_imbalance": max(load) / (sum(load) / len(load)) if sum(load) else 1.0}
            if arm == "B":
                m = [x for x in moved if x["cost"] == cost]
                row["bytes_gathered"] = statistics.median(x["gathered"] for x in m)
                row["bytes_scattered"] = statistics.median(x["scattered"] for x in m)
                ratios = sorted(b / a for a, b in zip(slow["A"], slow["B"]))
                row["b_over_a"] = ratios
                row["b_over_a_median"] = statistics.median(ratios)
            out.append(row)
    return out


HEADER = ("| delay model | arm | rank 0 median s (range) | rank 1 median s (range) | slower rank median s | B/A median (range) "
          "| tokens per server per call | requests per server per call | bytes between ranks (gathered + scattered) |")


def row(r: dict) -> str:
    ranks = " | ".join(f"{r['rank_median_s'][k]:.3f} ({r['rank_range_s'][k][0]:.3f}-{r['rank_range_s'][k][1]:.3f})"
                       for k in sorted(r["rank_median_s"]))
    ratio = f"{r['b_over_a_median']:.2f} ({r['b_over_a'][0]:.2f}-{r['b_over_a'][-1]:.2f})" if "b_over_a" in r else "-"
    moved = (f"{r['bytes_gathered'] / 2**20:.1f} + {r['bytes_scattered'] / 2**20:.1f} MiB" if "bytes_gathered" in r else "0")
    load = " / ".join(f"{t:,.0f}" for t in r["tokens_per_server_per_call"])
    reqs = " / ".join(f"{t:g}" for t in r["requests_per_server_per_call"])
    return f"| {r['cost']} | {r['arm']} | {ranks} | {r['slower_rank_median_s']:.3f} | {ratio} | {load} | {reqs} | {moved} |"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    import torch.multiprocessing as mp

    from mmrlvr.models.load import load_policy
    from tests.rollout.test_server_client import KEY, StandIn, _info, _tokens

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per arm and delay model (after one warm-up)")
    ap.add_argument("--prompts-per-rank", type=int, default=8, help="quickstart: prompts_per_step 16 over 2 ranks")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--image-size", type=int, default=448)
    ap.add_argument("--costs", default="tokens,batched", help="delay models, of: " + ", ".join(COSTS))
    ap.add_argument("--us-per-token", type=float, default=50.0, help="tokens model: microseconds per expected token")
    ap.add_argument("--prefill-us", type=float, default=20.0, help="batched model: microseconds per prompt token")
    ap.add_argument("--step-ms", type=float, default=10.0, help="batched model: milliseconds per decode step")
    ap.add_argument("--out", default="benchmarks/results/server_ranks.json")
    args = ap.parse_args(argv)
    args.costs = args.costs.split(",")
    bad = [c for c in args.costs if c not in COSTS]
    if bad or min(args.repeats, args.prompts_per_rank, args.group_size, args.max_new_tokens, args.image_size) < 1:
        raise SystemExit(f"--costs: unknown {bad} (known: {', '.join(COSTS)}); --repeats, --prompts-per-rank, "
                         "--group-size, --max-new-tokens and --image-size >= 1")
    model, processor = load_policy("tiny")
    tok = processor.tokenizer
    completion = [*tok.encode("3", add_special_tokens=False)] * (args.max_new_tokens - 1) + [tok.convert_tokens_to_ids("<|im_end|>")]
    count = image_token_counter(processor)
    servers = {}
    for cost in args.costs:
        for arm in ("A", "B"):
            servers[(cost, arm)] = [TimedServer(StandIn(_info(model, processor), completion), cost, tok, count, args)
                                    for _ in range(2)]
    urls = {k: [t.s.url for t in v] for k, v in servers.items()}
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    world = 2
    procs = [ctx.Process(target=_rank, args=(rk, world, port, urls, KEY, args, results)) for rk in range(world)]
    for p in procs:
        p.start()
    try:
        got = results.get(timeout=1800)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        for v in servers.values():
            for t in v:
                t.s.stop()
    summary = summarize(got["rows"], got["moved"], servers, args.repeats + 1, args.costs)
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for r in summary:
        print(row(r))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"settings": vars(args), "results": summary, "rows": got["rows"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
