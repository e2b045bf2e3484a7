"""How fast could a decoding step be on this CPU? `generate` against the same step's tensor ops
written out with nothing around them.

    python benchmarks/speed/decode_floor.py [--repeats 6] [--shapes cot_G8_tok128_px112]

Why: on the chain-of-thought shape decoding is most of mmrlvr's step, and the question is how much
of a decoding step is `generate`'s and transformers' modules' own host time (which a decoder of
our own could remove) and how much is the operators' (which no Python change removes). Arms, on
one batch of vs_trl.py's shape, from the same warm start and the same prompt cache, alternating:

  generate     `HFRolloutEngine.rollout` as the RL step runs it (shared prefill, inverse-CDF draw,
               sampler log-probs recorded); ms per decoding step = rollout s / longest completion
  ops_cat      the tiny Qwen2.5-VL language model's decoding step as bare tensor ops: no modules,
               no `generate`, one additive mask per step, rotary tables once per step, SDPA with
               `enable_gqa` (no repeated K/V), the draw and the drawn token's log-prob; the KV
               cache grown by `torch.cat` as transformers' dynamic cache does
  ops_inplace  the same with the KV cache allocated once and written in place (views into it)

The ops arms run as many steps as the generate arm's longest completion of the same repeat, on
all rows (their cost does not depend on which tokens are drawn). They are checked once against
the model: their first step's logits from the same prompt cache agree with the model's forward to
float rounding (`max_abs_logit_diff`), so they do the model's work and not a smaller one. This is
a measurement, not a decoder mmrlvr uses. Medians after one warm-up repeat; one torch thread.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.` imports when run as a script

from benchmarks.common import median_after_warmup  # noqa: E402
from benchmarks.speed.shape_ab import shape_ab_main  # noqa: E402

ARMS = ("generate", "ops_cat", "ops_inplace")


class OpsDecoder:
    """A Qwen2/2.5-VL language model's decoding step as bare ops, from a prefilled cache.

    cache: the prompt cache (N rows, P positions, per layer (N, kv_heads, P, d)); valid: (N, P)
    bool attention mask of the prompts; positions: (N,) the mRoPE text position of each row's
    next token (for text tokens the three mRoPE sections share it, so the plain rotary table is
    the model's)."""

    def __init__(self, model, cache, valid: torch.Tensor, positions: torch.Tensor, steps: int, inplace: bool):
        lm = model.model.language_model
        self.lm, self.head = lm, model.lm_head.weight
        cfg = lm.config
        self.nh, self.kvh = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = cfg.hidden_size // self.nh
        self.eps = cfg.rms_norm_eps
        self.inv_freq = lm.rotary_emb.inv_freq.float()
        self.scale = float(getattr(lm.rotary_emb, "attention_scaling", 1.0))
        layers = cache.layers
        n, prompt = valid.shape
        self.inplace = inplace
        if inplace:  # (N, kv_heads, P + steps, d) once; the first P positions are the prompt's
            self.k = [torch.cat((lay.keys, lay.keys.new_empty(n, self.kvh, steps, self.d)), -2) for lay in layers]
            self.v = [torch.cat((lay.values, lay.values.new_empty(n, self.kvh, steps, self.d)), -2) for lay in layers]
        else:
            self.k = [lay.keys.clone() for lay in layers]
            self.v = [lay.values.clone() for lay in layers]
        self.valid = torch.cat((valid.bool(), torch.ones(n, steps + 1, dtype=torch.bool)), 1)
        self.length = prompt - 1  # positions already in the cache (the prompt minus its last token)
        self.positions = positions.float()

    def _rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def _rotate(self, x):
        half = self.d // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (N, 1) -> (N, V) float32 logits of the next position."""
        n = tokens.shape[0]
        kv = self.length + 1
        x = self.lm.embed_tokens.weight[tokens]  # (N, 1, H)
        freqs = self.positions[:, None, None] * self.inv_freq  # (N, 1, d/2)
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = (emb.cos() * self.scale)[:, None], (emb.sin() * self.scale)[:, None]  # (N, 1, 1, d)
        mask = torch.zeros(n, 1, 1, kv).masked_fill_(~self.valid[:, None, None, :kv], float("-inf"))
        for i, layer in enumerate(self.lm.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = self._rms(x, layer.input_layernorm.weight)
            q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(n, 1, self.nh, self.d).transpose(1, 2)
            k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(n, 1, self.kvh, self.d).transpose(1, 2)
            v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(n, 1, self.kvh, self.d).transpose(1, 2)
            q = q * cos + self._rotate(q) * sin
            k = k * cos + self._rotate(k) * sin
            if self.inplace:
                self.k[i][:, :, kv - 1:kv].copy_(k)
                self.v[i][:, :, kv - 1:kv].copy_(v)
                keys, values = self.k[i][:, :, :kv], self.v[i][:, :, :kv]
            else:
                self.k[i] = keys = torch.cat((self.k[i], k), -2)
                self.v[i] = values = torch.cat((self.v[i], v), -2)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
            x = x + F.linear(o.transpose(1, 2).reshape(n, 1, -1), attn.o_proj.weight)
            h = self._rms(x, layer.post_attention_layernorm.weight)
            x = x + F.linear(F.silu(F.linear(h, mlp.gate_proj.weight)) * F.linear(h, mlp.up_proj.weight),
                             mlp.down_proj.weight)
        self.length += 1
        self.positions = self.positions + 1
        return F.linear(self._rms(x, self.lm.norm.weight)[:, -1], self.head).float()


def prompt_cache(model, engine, samples, group: int):
    """The shared prefill of `HFRolloutEngine.rollout`: (cache, (N, P) mask, (N, P) ids, (N,) next positions)."""
    from mmrlvr.data.collate import encode_prompts, model_kwargs
    from mmrlvr.rollout.prefill import cache_kwarg, prefill_once

    inputs = model_kwargs(encode_prompts(engine.processor, samples), next(model.parameters()).device)
    out = prefill_once(model, inputs, group)
    cache = out[cache_kwarg(model)]
    mask = out["attention_mask"]
    deltas = model.model.rope_deltas.reshape(-1)
    # generate's text position of the last prompt token counts its row's real tokens (left padding
    # excluded); the mRoPE offset of the row's media is added to it
    positions = (mask.sum(1) - 1 + deltas).to(torch.float32)
    return cache, mask, out["input_ids"], positions


def model_logits(model, cache, mask, ids, steps: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """What `generate` computes from the prompt cache over `steps` greedy decoding steps:
    ((steps, N, V) raw logits, (N, steps) the tokens it fed back)."""
    from transformers import GenerationConfig

    from mmrlvr.rollout.prefill import cache_kwarg

    config = GenerationConfig(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, output_logits=True,
                              return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                             **{cache_kwarg(model): copy.deepcopy(cache)})
    return torch.stack(out.logits).float(), out.sequences[:, ids.shape[1]:]


def _ops_run(model, cache, mask, positions, first: torch.Tensor, steps: int, inplace: bool) -> float:
    """Seconds for `steps` decoding steps of the ops decoder, drawing by inverse CDF as the rollout does."""
    from mmrlvr.rollout.sampler import draw_inverse_cdf

    dec = OpsDecoder(model, cache, mask, positions, steps, inplace)
    gen = torch.Generator().manual_seed(0)
    tokens = first
    t0 = time.perf_counter()
    for _ in range(steps):
        logits = dec.step(tokens)
        logp = torch.log_softmax(logits, -1)  # the sampler log-prob the rollout records
        tokens = draw_inverse_cdf(torch.softmax(logits, -1), gen)[:, None]
        logp.gather(-1, tokens)
    return time.perf_counter() - t0


def measure(name: str, warm: Path, repeats: int) -> dict:
    from mmrlvr.models.load import load_policy
    from mmrlvr.rollout.hf import HFRolloutEngine
    from benchmarks.speed.vs_trl import SHAPES
    from benchmarks.speed.vs_trl_arms import _samples, load_bench_config, prompts

    shape = {**SHAPES[name], "name": name}
    model_type = json.loads((warm / "config.json").read_text()).get("model_type")
    if model_type not in ("qwen2_5_vl", "qwen2_vl"):  # before anything loads
        raise SystemExit(f"{name}: the ops decoder is written for Qwen2/2.5-VL, not {model_type}")
    cfg = load_bench_config(shape, warm, repeats, Path("runs/bench_decode_floor") / name)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=str(warm)))
    model.eval()
    torch.set_num_threads(1)
    b, g = prompts(shape), shape["group"]
    samples = _samples(cfg, b * repeats)
    engine = HFRolloutEngine(model, processor)
    ms = {a: [] for a in ARMS}
    diff = None
    for i in range(repeats):
        batch = samples[i * b:(i + 1) * b]
        t0 = time.perf_counter()
        out = engine.rollout(batch, g, cfg.rollout, seed=i)
        steps = max(int(out.completion_mask.sum(1).max()), 1)
        ms["generate"].append((time.perf_counter() - t0) / steps * 1e3)
        cache, mask, ids, positions = prompt_cache(model, engine, batch, g)
        if diff is None:
            mine = OpsDecoder(model, cache, mask, positions, 1, inplace=True).step(ids[:, -1:])
            diff = float((mine - model_logits(model, cache, mask, ids)[0][0]).abs().max())
        for arm in ARMS[1:]:
            ms[arm].append(_ops_run(model, cache, mask, positions, ids[:, -1:], steps, arm == "ops_inplace")
                           / steps * 1e3)
    med = {a: median_after_warmup(ms[a]) for a in ARMS}
    return {"rows": b * g, "ms_per_decode_step": med, "spread_ms": {a: [min(ms[a][1:]), max(ms[a][1:])] for a in ARMS},
            "max_abs_logit_diff": diff, "generate_over_ops_inplace": med["generate"] / med["ops_inplace"]}


def main() -> int:
    return shape_ab_main(
        "cot_G8_tok128_px112", "benchmarks/results/decode_floor.json",
        "| shape | rows | generate ms/step | ops, cat cache ms/step | ops, in-place cache ms/step "
        "| generate / ops in place | first-step logits max diff |",
        measure,
        lambda name, r: (f"| {name} | {r['rows']} | {r['ms_per_decode_step']['generate']:.2f} "
                         f"| {r['ms_per_decode_step']['ops_cat']:.2f} | {r['ms_per_decode_step']['ops_inplace']:.2f} "
                         f"| {r['generate_over_ops_inplace']:.2f}x | {r['max_abs_logit_diff']:.1e} |"),
        key="shapes")


if __name__ == "__main__":
    sys.exit(main())
