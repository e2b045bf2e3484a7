"""Segmented generation (HF engine): every row to a prefix of P tokens, a caller keeps or drops rows,
the survivors continue from where they stopped, so a dropped row costs only its prefix.

`HFRolloutEngine.rollout_segmented(samples, G, sampling, seed, prefix_tokens=P, keep=keep)`. For
each `generate` call of the rollout (whole groups, `rollout.generate_max_rows`; one call without a
bound), with R = the call's B' x G rows:

1. `generate` runs min(P, max_new_tokens) steps (fewer if every row stops) and returns its KV
   cache (`return_dict_in_generate`): prompt + P - 1 tokens per row, the P-th drawn, not yet fed.
2. `keep(view)` gets a `PrefixView` of the R rows and returns R booleans: each row's prompt index
   and group position (so whole groups stay addressable), its prefix tokens (up to its stop token,
   at most P), their sampler log-probs (R, P), whether it already stopped, and (hidden=True) the
   (R, H) final hidden state the row's last prefix token was drawn from: what `lm_head` read, i.e.
   `output_hidden_states[-1][:, -1]` of that step, taken by a pre-hook on the output embedding
   during the same pass (no extra forward, one (R, H) kept, not every layer of every step). For a
   row that ran to P it has read the prompt and the first P - 1 tokens (the P-th has not been
   through the model); for one that stopped at n < P, the step that drew its stop token.
   `keep` is called once per call (whole groups), so `generate_max_rows` still bounds the KV cache
   held at the prefix. Torch's global random state is restored after it (`torch.random.fork_rng`).
3. The continuation feeds each continuing row's P-th token into the kept cache (cut with
   `batch_select_indices` to the rows, and the per-row position state of `adapter.batch_state`,
   Qwen's `rope_deltas`, alike): nothing of the prefix is recomputed. Which rows: when nothing
   still generating was dropped, the call's whole batch, the rows that stopped inside the prefix
   marked done at once (a stopping criterion) and padded, as in the unpruned `generate`, so the
   kernels see the same batch shape; when rows were dropped, only the A kept rows still
   generating, (A, L + P) ids. The draw processors are the same objects: `InverseCdfSampler`
   keeps its generator (one `total`-wide draw per step, so the stream is at step P + 1) and takes
   its continuing rows of it (`rows` becomes their indices in the rollout).

Output: `SegmentedOutput(output, rows, counts)`: `output` the usual `RolloutOutput` of the K kept
rows in rollout order (completion_ids, mask and sampler_logprobs (K, T), T the longest kept row;
`Completion.sample_index` the prompt; groups of unequal size), `rows` (K,) their indices in the
unpruned rollout (prompt * G + position).

Guarantee (`rollout.sampler=inverse_cdf`, the default, and greedy): a row's token at step t is
drawn from the uniform of row r at step t whatever the batch, so with `keep` keeping every row the
completions (ids, texts, sampler log-probs, bit for bit) are `rollout(...)`'s for the seed, and
with rows dropped the survivors' completions are the same rows of the unpruned rollout (up to the
float rounding of the smaller batch in the model's kernels, as for `generate_max_rows`: the tokens
equal on the CPU tests, log-probs within ~1.5e-6). Recomputing the prefix instead (a second
`generate` from prompt + prefix, media included, without the cache) is not needed: it would cost a
prefill of L + P positions a row and round otherwise than the cached decode steps. `multinomial`: transformers draws
for the batch's rows together from the global stream, so while the batch is unchanged (nothing
dropped) the completions are `rollout(...)`'s; once a row still generating is dropped the
prefixes are still `rollout(...)`'s but the continuations are other, equally distributed, draws.

Not with parameters sharded across ranks (`synced_generation`): a rank whose rows were all dropped
would skip the continuation every other rank's `generate` waits on; refused with a message.

vLLM (not built): its continuation would be a second request with prompt + prefix as the prompt;
its prefix cache may keep the KV, but its sampler state is not continued (a seeded request
restarts its stream), so even keep-all completions would differ from a one-request rollout.

Counts (`SegmentCounts`): `tokens_generated` the tokens sampled (every row's prefix, the
survivors' continuations), `row_steps` the decode positions the forwards computed (the batch's
rows x steps, both segments), `tokens_saved_max` the pruned rows' unspent budget (rows still
generating at the prefix x (max_new_tokens - P)): what pruning saved at most; the exact saving
needs the pruned rows' unpruned lengths, which nobody generated.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from mmrlvr.data.collate import encode_prompts, pad_right, select_rows
from mmrlvr.models.adapters import model_adapter
from mmrlvr.models.wrapping import base_model
from mmrlvr.rollout.base import RolloutOutput
from mmrlvr.rollout.generation import SampledLogprobs, generate_calls, sampling_config, synced_generation, trim_at_stop
from mmrlvr.rollout.prefill import cache_kwarg
from mmrlvr.rollout.sampler import InverseCdfSampler
from mmrlvr.types import Completion, Sample


@dataclass
class PrefixView:
    """The R rows of one `generate` call at the prefix (whole groups, rollout order)."""

    prompt_index: torch.Tensor  # (R,) long: the row's prompt, an index into `samples`
    group_position: torch.Tensor  # (R,) long: its place in the group, 0..G-1
    tokens: list[list[int]]  # R lists: the prefix, up to and including a stop token, at most P
    sampler_logprobs: torch.Tensor  # (R, P') P' <= P the steps run; 0 past a row's prefix
    finished: torch.Tensor  # (R,) bool: stopped within the prefix (nothing to continue)
    hidden: torch.Tensor | None = None  # (R, H) float32: what lm_head read when the last prefix token was drawn


@dataclass
class SegmentCounts:
    rows: int = 0  # rows generated to the prefix
    kept: int = 0
    pruned_alive: int = 0  # dropped while still generating at the prefix
    tokens_generated: int = 0
    row_steps: int = 0
    tokens_saved_max: int = 0


@dataclass
class SegmentedOutput:
    output: RolloutOutput  # the kept rows only (K of N = B x G), rollout order; sample_index as usual
    rows: torch.Tensor  # (K,) long: each kept row's index in the unpruned rollout (prompt * G + position)
    counts: SegmentCounts = field(default_factory=SegmentCounts)


class PrefixHidden:
    """Per row, the final hidden state (lm_head's input) of the step that drew its latest token,
    until it stops: a pre-hook on the output embedding holds one step, this processor keeps it for
    the rows whose generated part holds no stop token yet."""

    def __init__(self, prompt_len: int, stop_ids: list[int]):
        self.prompt_len, self.stop_ids = prompt_len, stop_ids
        self.last: torch.Tensor | None = None  # (R, H)
        self._step: torch.Tensor | None = None

    def hook(self, module, args):
        self._step = args[0][:, -1].detach().float()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        gen = input_ids[:, self.prompt_len:]
        alive = ~torch.isin(gen, torch.tensor(self.stop_ids, device=gen.device)).any(1)
        if self.last is None:
            self.last = self._step.clone()
        else:
            self.last[alive] = self._step[alive]
        return scores

    @contextlib.contextmanager
    def hooked(self, model):
        handle = base_model(model).get_output_embeddings().register_forward_pre_hook(self.hook)
        try:
            yield
        finally:
            handle.remove()


@dataclass
class _Prefix:
    """One call's state at the prefix: what `_continue` needs to go on."""

    sequences: torch.Tensor  # (R, L + P') on the model's device
    attention_mask: torch.Tensor  # (R, L + P')
    cache: object
    draw: list
    recorder_temperature: float
    tokens: list[list[int]]
    logprobs: torch.Tensor  # (R, P')
    finished: torch.Tensor  # (R,) bool
    steps: int  # P'


def _prefix(engine, prompt_inputs: dict, group_size: int, sampling, seed: int, greedy: bool, max_new: int,
            prefix: int, rows: slice, total: int, hidden: bool) -> tuple[_Prefix, torch.Tensor | None]:
    """Segment 1 of one call: `generate` to min(P, max_new) tokens, keeping its cache."""
    width = prompt_inputs["input_ids"].shape[1]
    inputs, cfg, recorder, draw = engine._prepared(prompt_inputs, group_size, sampling, seed, greedy,
                                                   min(prefix, max_new), rows, total)
    cfg.return_dict_in_generate = True
    capture = PrefixHidden(width, engine.stop_ids) if hidden else None
    with capture.hooked(engine.model) if capture else contextlib.nullcontext():
        out = engine._call_generate(inputs, cfg, [recorder, *draw, *([capture] if capture else [])])
    seq = out.sequences
    new = seq[:, width:].cpu()
    _, mask, lengths, finished = trim_at_stop(new, engine.stop_ids, engine.pad_id)
    lp = recorder.result(new, mask)
    prompt_mask = prompt_inputs["attention_mask"].to(seq.device).repeat_interleave(group_size, dim=0)
    attn = torch.cat([prompt_mask, torch.ones_like(seq[:, width:])], dim=1)
    tokens = [row[:n].tolist() for row, n in zip(new, lengths.tolist())]
    cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")  # by 5.2x's name or 5.19's
    state = _Prefix(seq, attn, cache, draw, recorder.temperature, tokens, lp, finished, new.shape[1])
    return state, capture.last if capture else None


def _continue(engine, state: _Prefix, go: torch.Tensor, first_row: int, sampling, greedy: bool,
              max_new: int) -> tuple[list[tuple], int]:
    """Segment 2 of one call: rows `go` (indices into the call's R) from their cached prefix to
    max_new tokens; rows that stopped within the prefix are done for generate after one step, as
    in the unpruned run. Returns per row (continuation tokens, stopped, log-probs) and the steps run."""
    model = engine.model
    device = state.sequences.device
    idx = go.to(device)
    state.cache.batch_select_indices(idx)
    owner = getattr(base_model(model), "model", None)
    for name in model_adapter(model).batch_state:  # per-row position state (Qwen's rope_deltas)
        value = getattr(owner, name, None)
        rows = state.sequences.shape[0]
        if isinstance(value, torch.Tensor) and value.shape[0] and rows % value.shape[0] == 0:
            # B' rows where generate repeated the prompts itself (num_return_sequences), else R
            value = value.repeat_interleave(rows // value.shape[0], dim=0)
            setattr(owner, name, value[idx.to(value.device)])
    for proc in state.draw:
        if isinstance(proc, InverseCdfSampler):  # the same generator, now at step P + 1: the survivors' rows
            proc.rows = go + first_row
    cfg = sampling_config(sampling, group_size=1, max_new_tokens=max_new - state.steps, stop_ids=engine.stop_ids,
                          pad_id=engine.pad_id, suppress_ids=engine.suppress_ids, greedy=greedy)
    recorder = SampledLogprobs(state.recorder_temperature)
    kwargs = {"input_ids": state.sequences[idx], "attention_mask": state.attention_mask[idx],
              cache_kwarg(model): state.cache}
    out = engine._call_generate(kwargs, cfg, [recorder, *state.draw], [_Done(state.finished[go].to(device))])
    new = out[:, state.sequences.shape[1]:].cpu()
    _, mask, lengths, finished = trim_at_stop(new, engine.stop_ids, engine.pad_id)
    lp = recorder.result(new, mask)
    toks = [row[:n].tolist() for row, n in zip(new, lengths.tolist())]
    return [(t, bool(finished[i]), lp[i, : len(t)]) for i, t in enumerate(toks)], new.shape[1]


class _Done:
    """A stopping criterion: the rows that stopped within the prefix are done (padded from then on)."""

    def __init__(self, done: torch.Tensor):
        self.done = done

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        return self.done


@torch.no_grad()
def rollout_segmented(engine, samples: Sequence[Sample], group_size: int, sampling, seed: int, prefix_tokens: int,
                      keep: Callable[[PrefixView], list[bool]], greedy: bool = False,
                      max_new_tokens: int | None = None, hidden: bool = True) -> SegmentedOutput:
    """`engine.rollout(...)` with a keep-or-drop decision at `prefix_tokens` (see the module)."""
    if prefix_tokens < 1:
        raise ValueError(f"prefix_tokens={prefix_tokens}: a prefix is at least one token")
    if synced_generation(engine.model):  # every rank would have to join a continuation it may not have
        raise NotImplementedError("segmented generation with sharded parameters across ranks (FSDP, ZeRO-3): a rank "
                                  "whose rows were all dropped would skip the continuation's collectives")
    max_new = max_new_tokens or sampling.max_new_tokens
    prompt_inputs = encode_prompts(engine.processor, samples)
    engine._check_sampling(sampling, greedy)
    calls = generate_calls(len(samples), group_size, getattr(sampling, "generate_max_rows", None))
    total, counts = len(samples) * group_size, SegmentCounts()
    was_training = engine.model.training
    engine.model.eval()
    torch.manual_seed(seed)  # multinomial: the global stream, as `rollout`
    try:
        parts = [_one_call(engine, prompt_inputs if len(calls) == 1 else select_rows(prompt_inputs, list(prompts)),
                           group_size, sampling, seed, greedy, max_new, prefix_tokens, prompts, total, keep, hidden, counts)
                 for prompts in calls]
    finally:
        if was_training:
            engine.model.train()
    rows = [r for part in parts for r in part]
    return SegmentedOutput(_assemble(engine, prompt_inputs, rows, group_size), torch.tensor([r[0] for r in rows],
                           dtype=torch.long), counts)


def _one_call(engine, prompt_inputs, group_size, sampling, seed, greedy, max_new, prefix, prompts: range, total,
              keep, hidden, counts: SegmentCounts) -> list[tuple]:
    """Both segments of one call: per kept row (rollout row, tokens, log-probs, stopped)."""
    first = prompts.start * group_size
    state, h = _prefix(engine, prompt_inputs, group_size, sampling, seed, greedy, max_new, prefix,
                       slice(first, prompts.stop * group_size), total, hidden)
    r = len(state.tokens)
    local = torch.arange(r)
    view = PrefixView(local // group_size + prompts.start, local % group_size, state.tokens, state.logprobs,
                      state.finished.clone(), h)
    devices = [state.sequences.device] if state.sequences.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        kept = torch.tensor([bool(k) for k in keep(view)], dtype=torch.bool)
    if kept.shape[0] != r:
        raise ValueError(f"keep returned {kept.shape[0]} decisions for {r} rows")
    alive = ~state.finished & torch.tensor(state.steps < max_new)
    pruned = ~kept & alive
    # nothing pruned: the call's batch as it was (rows that stopped ride along as done), so every float
    # is the unpruned run's; rows pruned: only the survivors still generating
    go = torch.arange(r) if not pruned.any() else (kept & alive).nonzero().flatten()
    cont, steps2 = _continue(engine, state, go, first, sampling, greedy, max_new) if (kept & alive).any() else ([], 0)
    counts.rows += r
    counts.kept += int(kept.sum())
    after = {i: row for i, row in zip(go.tolist(), cont) if kept[i] and alive[i]}
    counts.pruned_alive += int(pruned.sum())
    counts.tokens_generated += sum(len(t) for t in state.tokens) + sum(len(t) for t, _, _ in after.values())
    counts.row_steps += r * state.steps + len(go) * steps2
    counts.tokens_saved_max += int(pruned.sum()) * (max_new - state.steps)
    out = []
    for i in kept.nonzero().flatten().tolist():
        toks, lp = state.tokens[i], state.logprobs[i, : len(state.tokens[i])]
        done = bool(state.finished[i])
        if i in after:
            more, done, more_lp = after[i]
            toks, lp = toks + more, torch.cat([lp, more_lp])
        out.append((first + i, toks, lp, done))
    return out


def _assemble(engine, prompt_inputs: dict, rows: list[tuple], group_size: int) -> RolloutOutput:
    """The kept rows as a `RolloutOutput` (K rows, right padded to the longest)."""
    token_lists = [toks for _, toks, _, _ in rows]
    ids, mask = pad_right(token_lists, engine.pad_id) if rows else (torch.zeros(0, 0, dtype=torch.long),) * 2
    t = ids.shape[1]
    lp = torch.stack([F.pad(p, (0, t - p.shape[0])) for _, _, p, _ in rows]) if rows else torch.zeros(0, 0)
    texts = engine.processor.tokenizer.batch_decode(token_lists, skip_special_tokens=True) if rows else []
    completions = [Completion(row // group_size, text, toks, truncated=not done)
                   for (row, toks, _, done), text in zip(rows, texts)]
    return RolloutOutput(completions, prompt_inputs, ids, mask, lp)
