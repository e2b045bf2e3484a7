"""Per-token signals of the policy on a rollout batch, without gradient: entropy, visual
dependency (one extra forward on a corrupted copy of the media), visual similarity (PEPO: hidden
states against the visual tokens' hidden states), region attention (KAWHI: the clean forward runs
with eager attention and hooks on chosen layers) and, for analysis, visual attention.

Every forward goes through the media-once path (`shared_media_outputs`): the vision tower runs
once per distinct prompt, also for the corrupted copy, whose processed patches are blacked out
before encoding. Rows are processed in chunks so that the (rows, T, V) logits stay bounded.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import torch
import torch.nn.functional as F

from mmrlvr.algos.token_weights import attention_to_visual, similarity_to_visual, visual_dependency
from mmrlvr.data.collate import select_rows
from mmrlvr.methods.kawhi.regions import head_map, region_attention
from mmrlvr.models.wrapping import base_model
from mmrlvr.models.adapters import blackout_patches
from mmrlvr.train.logprobs import (_MEDIA, completion_logprobs, join_prompt_completion, logits_to_logprobs,
                                   shared_media_outputs)

SIGNALS = ("entropy", "visual_dependency", "visual_similarity", "region_attention")
_PIXELS = tuple(pix for _, pix, _, _ in _MEDIA)


def black_fill(processor) -> dict[str, torch.Tensor]:
    """Per-channel value of a black pixel after each media processor's normalisation."""
    out = {}
    for pix, attr in zip(_PIXELS, ("image_processor", "video_processor")):
        proc = getattr(processor, attr, None)
        mean, std = getattr(proc, "image_mean", None), getattr(proc, "image_std", None)
        if mean is not None and std is not None:
            out[pix] = -torch.as_tensor(mean, dtype=torch.float) / torch.as_tensor(std, dtype=torch.float)
    return out


def corrupt_media(prompt_inputs: dict, prob: float, seed: int, fill: dict | None = None) -> dict:
    """A copy of the prompt inputs whose vision patches are each blacked out with probability
    `prob` (seeded). A row of `pixel_values` is one patch (14x14 pixels x temporal_patch frames for
    Qwen2-VL, channel-major), so images and video frames are corrupted the same way. The prompts of
    a group share one corrupted copy, so the corrupted forward still encodes each prompt once."""
    base = prompt_inputs.get("_base", prompt_inputs)
    gen = torch.Generator().manual_seed(int(seed))
    new = dict(base)
    for pix in _PIXELS:
        if pix not in base:
            continue
        x = base[pix]
        if x.dim() >= 4:  # (..., C, H, W) images of the per-image/per-row layouts (Gemma 3, LLaVA, Idefics3)
            new[pix] = blackout_patches(x, prob, gen, (fill or {}).get(pix))
            continue
        drop = torch.rand(x.shape[0], generator=gen) < prob
        c = (fill or {}).get(pix)
        value = torch.zeros(x.shape[1]) if c is None else c.repeat_interleave(x.shape[1] // c.numel())
        new[pix] = torch.where(drop[:, None], value.to(x.dtype), x)
    if "_base" not in prompt_inputs:
        return new
    n = len(base["_n_images"])
    return select_rows({**new, "_base": new, "_row_prompt": list(range(n))}, prompt_inputs["_row_prompt"])


def _forward(model, inputs: dict, ids: torch.Tensor, mask: torch.Tensor, **extra):
    """One teacher-forced forward of prompts + completions through the media-once path."""
    kw = join_prompt_completion(inputs, ids, mask, next(model.parameters()).device)
    shared = shared_media_outputs(model, inputs)
    if shared:
        for pix in _PIXELS:
            kw.pop(pix, None)
        kw["mm_encoder_outputs"] = shared
    return model(**kw, use_cache=False, **extra)


def _decoder_module(model, name: str):
    inner = base_model(model)
    for path in (f"model.language_model.{name}", f"model.text_model.{name}", f"model.{name}", f"language_model.model.{name}"):
        obj = inner
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise AttributeError(f"cannot find the decoder {name} of {type(inner).__name__}")


def _decoder_layers(model):
    return _decoder_module(model, "layers")


def _visual_ids(model) -> torch.Tensor:
    cfg = base_model(model).config
    ids = {getattr(cfg, k, None) for k in ("image_token_id", "video_token_id", "image_token_index", "video_token_index")}
    return torch.tensor(sorted(i for i in ids if i is not None))


@contextmanager
def _similarity_probe(model, layers: Sequence[int] | None, t: int, out: list, at_token: bool = False):
    """Hooks that turn hidden states into (n, T) similarities as the forward runs and keep only
    those: memory stays O(n * (L + T)) per state, not all hidden states.

    similarity_t = mean over visual positions v of cos(h_t, h_v) = normalise(h_t) . mean_v normalise(h_v),
    with h_t the state that predicts completion token t (aligned with its log-prob and entropy) or,
    with `at_token`, the state at token t; averaged over the chosen states. `layers`: decoder
    layers whose outputs are used, or None: every state of `output_hidden_states` (the embeddings
    entering layer 0, each layer's output, the last one after the final norm), as PEPO's released
    code averages them (src/pepo/train/grpo_trainer.py lines 83-96).
    """
    all_layers = _decoder_layers(model)
    vis_ids = _visual_ids(model)
    state: dict = {}

    def pre(_mod, _args, kwargs):
        state["visual"] = torch.isin(kwargs["input_ids"], vis_ids.to(kwargs["input_ids"].device)).float()

    def add(h):
        sim = similarity_to_visual(h, state["visual"], t, at_token)
        state["sim"] = sim if "sim" not in state else state["sim"] + sim
        state["n"] = state.get("n", 0) + 1

    def hook(_mod, _args, output):
        add(output[0] if isinstance(output, tuple) else output)

    def embed_hook(_mod, args, kwargs):
        add(args[0] if args else kwargs["hidden_states"])

    handles = [base_model(model).register_forward_pre_hook(pre, with_kwargs=True)]
    if layers is None:
        handles.append(all_layers[0].register_forward_pre_hook(embed_hook, with_kwargs=True))
        handles += [all_layers[i].register_forward_hook(hook) for i in range(len(all_layers) - 1)]
        handles.append(_decoder_module(model, "norm").register_forward_hook(hook))
    else:
        chosen = sorted({i % len(all_layers) for i in layers})
        handles += [all_layers[i].register_forward_hook(hook) for i in chosen]
    try:
        yield state
    finally:
        for h in handles:
            h.remove()
        if "sim" in state:
            out.append(state["sim"] / state["n"])


@contextmanager
def _region_probe(model, layers: Sequence[int], heads: int, frac: float, valid: torch.Tensor, out: list):
    """Eager attention for the forward and hooks on the chosen decoder layers' attention modules
    that reduce each (n, heads, L, L) weight tensor at once to the (n, t, L) map of the row's
    vision heads (`kawhi.regions.head_map`); after the forward, `kawhi.regions.region_attention` over the layers
    gives (n, t). Memory: O(n * t * L) per chosen layer, never all layers' weights together."""
    inner = base_model(model)
    before = inner.config._attn_implementation
    all_layers = _decoder_layers(model)
    vis_ids = _visual_ids(model)
    t = valid.shape[1]
    state: dict = {"maps": []}

    def pre(_mod, _args, kwargs):
        ids = kwargs["input_ids"]
        state["visual"] = torch.isin(ids, vis_ids.to(ids.device)).float()

    def hook(_mod, _args, output):
        attn = output[1][:, :, -(t + 1) : -1]  # the states predicting the t completion tokens
        state["maps"].append(head_map(attn, state["visual"], valid.to(attn.device), heads))

    bad = [i for i in layers if not -len(all_layers) <= i < len(all_layers)]
    if bad:
        raise ValueError(f"token_weighting.kawhi_layers={list(layers)}: layers {bad} do not exist "
                         f"(the decoder has {len(all_layers)})")
    chosen = sorted({i % len(all_layers) for i in layers})
    inner.set_attn_implementation("eager")
    handles = [inner.register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [all_layers[i].self_attn.register_forward_hook(hook) for i in chosen]
    try:
        yield state
    finally:
        for h in handles:
            h.remove()
        inner.set_attn_implementation(before)
    out.append(region_attention(state["maps"], state["visual"], valid.to(state["visual"].device), frac))


def _checked_needs(needs: Sequence[str], clean: dict | None) -> set[str]:
    """The requested signals as a set, refused before any forward runs: a name that is not a signal,
    or given log-probs (`clean`) with a signal that only the clean forward's states can give."""
    unknown = set(needs) - set(SIGNALS)
    if unknown:
        raise KeyError(f"unknown token signals {sorted(unknown)}; known: {', '.join(SIGNALS)}")
    needs = set(needs)
    if clean is not None and needs & {"visual_similarity", "region_attention"}:
        raise ValueError("visual_similarity and region_attention need the clean forward's hidden states or "
                         "attention; they cannot reuse given log-probs")
    return needs


def _row_chunks(n: int, chunks: Sequence[Sequence[int]] | None, chunk_rows: int) -> list[list[int]]:
    """The rows of each forward: the given chunks, else `chunk_rows` consecutive rows at a time.
    Each of the n rows must be in exactly one, or the results could not be put back in row order."""
    chunks = [list(c) for c in chunks] if chunks is not None else [list(range(s, min(n, s + chunk_rows)))
                                                                     for s in range(0, n, chunk_rows)]
    order = [r for c in chunks for r in c]
    if sorted(order) != list(range(n)):
        raise ValueError(f"signal chunks must cover each of the {n} rows once")
    return chunks


PROBED = frozenset({"visual_similarity", "region_attention"})
"""Signals read by hooks on the padded (rows, positions) hidden states or attention: never packed."""


def _clean_chunk(model, inputs: dict, ids: torch.Tensor, mask: torch.Tensor, tc: int, needs: set[str],
                 temperature: float, suppress_ids: Sequence[int], similarity: tuple, kawhi: tuple,
                 packed: bool = False) -> dict[str, list]:
    """One chunk's clean forward: its (rows, tc) log-probs and entropy, plus the similarity and region
    maps of the probes hooked in for it (only those asked for: each adds hooks, region attention
    eager attention). `similarity`: (layers, at_token); `kawhi`: (layers, heads, region_frac).
    `packed` (`train.padding_free`): without probes, the rows' real tokens as one sequence."""
    sims: list = []
    regions: list = []
    probe = _similarity_probe(model, similarity[0], tc, sims, similarity[1]) if "visual_similarity" in needs else _null()
    region = _region_probe(model, *kawhi, mask, regions) if "region_attention" in needs else _null()
    if packed and not needs & PROBED:  # no hook reads (rows, positions) states: one packed sequence
        lp, ent = completion_logprobs(model, inputs, ids, mask, temperature=temperature, suppress_ids=suppress_ids,
                                      with_entropy=True, padding_free=True)
        return {"logprobs": [lp], "entropy": [ent], "visual_similarity": [], "region_attention": []}
    with probe, region:
        logits = _forward(model, inputs, ids, mask, logits_to_keep=tc + 1).logits[:, :tc]
    lp, ent = logits_to_logprobs(logits, ids.to(logits.device), temperature, suppress_ids, with_entropy=True)
    return {"logprobs": [lp], "entropy": [ent], "visual_similarity": sims, "region_attention": regions}


def _in_row_order(out: dict[str, list], needs: set[str], order: list[int], valid: torch.Tensor,
                  corrupted: bool) -> dict[str, torch.Tensor]:
    """The chunks' pieces joined back into row order, the requested signals only, 0 off `valid`;
    visual_dependency compares the clean log-probs with the corrupted forward's."""
    back = torch.empty(len(order), dtype=torch.long)
    back[torch.tensor(order)] = torch.arange(len(order))  # chunk order -> row order

    def rows_of(parts: list) -> torch.Tensor:
        return torch.cat(parts)[back]

    result = {}
    for name in ("entropy", "visual_similarity", "region_attention"):
        if name in needs:
            result[name] = rows_of(out[name]) * valid
    if corrupted:
        result["visual_dependency"] = visual_dependency(rows_of(out["logprobs"]), rows_of(out["corrupt"]), valid)
    return result


@torch.no_grad()
def compute_signals(
    model, prompt_inputs: dict, completion_ids: torch.Tensor, completion_mask: torch.Tensor,
    needs: Sequence[str], *, temperature: float = 1.0, suppress_ids: Sequence[int] = (),
    corrupt_prob: float = 0.5, seed: int = 0, fill: dict | None = None,
    similarity_layers: Sequence[int] | None = (-1,), similarity_at_token: bool = False, chunk_rows: int = 64,
    clean: dict[str, torch.Tensor] | None = None, chunks: Sequence[Sequence[int]] | None = None,
    valid: torch.Tensor | None = None,
    kawhi_layers: Sequence[int] = (-2, -1), kawhi_heads: int = 2, kawhi_region_frac: float = 0.25,
    padding_free: bool = False,
) -> dict[str, torch.Tensor]:
    """The requested signals, each (N, T) float on the CPU, 0 on padding.

    Costs: entropy and visual_similarity come from one clean forward; visual_dependency adds one
    forward on the corrupted media (and needs the clean one for the tokens' log-probs).
    `similarity_layers` / `similarity_at_token`: see `_similarity_probe` (None / True: PEPO's
    released similarity). `clean`: (N, T) `logprobs` and `entropy` of these rows from a forward
    already run (the update's own, at the same temperature and suppressed ids): the clean forward
    is skipped, so entropy costs nothing and visual_dependency one forward (not visual_similarity,
    which reads hidden states). `chunks`: the rows of each forward (indices into the N rows, each
    row in one; the learner's token-budget packing), else `chunk_rows` consecutive rows at a time.
    `valid`: (N, T) the tokens to report (default `completion_mask`); an episode's rows pass the
    policy's own tokens, while the forward still reads every completion token (inserted messages
    and their images are context), so inserted tokens come back 0.
    region_attention (`kawhi_*`: see `_region_probe`) runs the clean forward with eager attention.
    `padding_free` (`train.padding_free`): the log-prob forwards (clean without a probe, corrupted)
    run packed (`mmrlvr.models.packing`); the probed ones stay padded.
    """
    needs = _checked_needs(needs, clean)
    n, t = completion_ids.shape
    out: dict[str, list] = {k: [] for k in ("logprobs", "entropy", "visual_similarity", "region_attention", "corrupt")}
    corrupted = corrupt_media(prompt_inputs, corrupt_prob, seed, fill) if "visual_dependency" in needs else None
    chunks = _row_chunks(n, chunks, chunk_rows)
    for rows in chunks:
        # forward only up to these rows' longest completion: causal positions never see the padding
        tc = max(1, int(completion_mask[rows].sum(1).max()))
        ids, mask = completion_ids[rows, :tc], completion_mask[rows, :tc]
        pad = (0, t - tc)
        if clean is None:
            parts = _clean_chunk(model, select_rows(prompt_inputs, rows), ids, mask, tc, needs, temperature,
                                 suppress_ids, (similarity_layers, similarity_at_token),
                                 (kawhi_layers, kawhi_heads, kawhi_region_frac), padding_free)
            for key, pieces in parts.items():
                out[key] += [F.pad(x.cpu(), pad) for x in pieces]
        else:
            out["logprobs"].append(clean["logprobs"][rows].detach().float().cpu())
            out["entropy"].append(clean["entropy"][rows].detach().float().cpu())
        if corrupted is not None and padding_free:
            lp_c = completion_logprobs(model, select_rows(corrupted, rows), ids, mask, temperature=temperature,
                                       suppress_ids=suppress_ids, padding_free=True)[0]
            out["corrupt"].append(F.pad(lp_c.cpu(), pad))
        elif corrupted is not None:
            logits = _forward(model, select_rows(corrupted, rows), ids, mask, logits_to_keep=tc + 1).logits[:, :tc]
            lp_c = logits_to_logprobs(logits, ids.to(logits.device), temperature, suppress_ids)[0]
            out["corrupt"].append(F.pad(lp_c.cpu(), pad))
    valid = (completion_mask if valid is None else valid).bool().cpu()
    return _in_row_order(out, needs, [r for c in chunks for r in c], valid, corrupted is not None)


@contextmanager
def _null():
    yield None


@torch.no_grad()
def visual_attention(
    model, prompt_inputs: dict, completion_ids: torch.Tensor, completion_mask: torch.Tensor,
    layers: Sequence[int] | None = None, heads: Sequence[int] | None = None, chunk_rows: int = 16,
) -> torch.Tensor:
    """(N, T) share of attention that the state predicting each completion token pays to the visual
    positions, averaged over `layers` (default all) and `heads` (default all); 0 on padding.

    Runs eager attention for the call (sdpa and flash attention do not return the weights), then
    restores the model's own implementation. For analysis and the notebooks, not for training.
    """
    inner = base_model(model)
    before = inner.config._attn_implementation
    n, t = completion_ids.shape
    vis_ids = _visual_ids(model)
    chunks = []
    inner.set_attn_implementation("eager")
    try:
        for start in range(0, n, chunk_rows):
            rows = list(range(start, min(n, start + chunk_rows)))
            sub = select_rows(prompt_inputs, rows)
            att = _forward(model, sub, completion_ids[rows], completion_mask[rows], output_attentions=True,
                           logits_to_keep=1).attentions
            visual = torch.isin(sub["input_ids"], vis_ids).float()
            visual = torch.cat([visual, torch.zeros(len(rows), t)], 1)  # completions are not visual
            chosen = range(len(att)) if layers is None else [i % len(att) for i in layers]
            per_layer = []
            for i in chosen:
                a = att[i].cpu()
                per_layer.append(attention_to_visual(a if heads is None else a[:, list(heads)], visual, t))
            chunks.append(torch.stack(per_layer).mean(0))
    finally:
        inner.set_attn_implementation(before)
    return torch.cat(chunks) * completion_mask.bool().float()
