"""Per-token log-probs of completions from one teacher-forced forward of the policy."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Sequence

import torch

from mmrlvr.data.collate import join_prompt_completion, select_rows  # noqa: F401 (join_prompt_completion: re-exported)
from mmrlvr.models.wrapping import base_model, unwrap
from mmrlvr.models.adapters import features_per_row, model_adapter
from mmrlvr.models.patches.attention_mask import masks_once
from mmrlvr.models.patches.options import PLAIN, ForwardOptions
from mmrlvr.models.packing import is_prefix_mask, kept_positions, model_why_not_packed, pack_joined
from mmrlvr.config.schema import ConfigError
from mmrlvr.models.patches.chunked_head import head_logprobs, kept_head_input, output_layer, why_not_chunked
from mmrlvr.models.patches.gated_mlp import recomputed_gated_mlps
from mmrlvr.models.patches.rms_norm import recomputed_rms_norms
from mmrlvr.rollout.prefill import prompt_cache, why_not_shared

_MEDIA = (("image", "pixel_values", "image_grid_thw", "_n_images"),
          ("video", "pixel_values_videos", "video_grid_thw", "_n_videos"))


_logged: set[tuple[str, str]] = set()


def _per_row(model_type: str, why: str) -> None:
    """Log once per family and reason that its media are encoded per row (correct, only slower)."""
    if (model_type, why) not in _logged:
        _logged.add((model_type, why))
        logging.getLogger(__name__).warning("%s: media encoded once per row, not once per group: %s", model_type, why)
    return None


def shared_media_outputs(model, prompt_inputs: dict) -> dict | None:
    """Encode each distinct prompt's images/videos once and hand every row its prompt's features.

    Rows of a group repeat one prompt; the vision tower then runs B times instead of B * G, and
    the gradient through the shared features is the sum over the group, exactly as if each row
    had been encoded on its own. Which inputs the encoder takes and how its output is split per
    item is the family's (`mmrlvr.models.adapters`). None when the inputs or the model do not
    allow it (then every row is encoded with its own copy of the media).
    """
    inner = base_model(model)
    if "_base" not in prompt_inputs or not getattr(inner, "_supports_mm_encoder_outputs", lambda: False)():
        return None
    adapter = model_adapter(inner)
    rows = prompt_inputs["_row_prompt"]
    uniq = sorted(set(rows))
    sub = select_rows(prompt_inputs["_base"], uniq)
    out = {}
    for modality, counts in (("image", "_n_images"), ("video", "_n_videos")):
        keys = adapter.feature_inputs.get(modality)
        pix = "pixel_values" if modality == "image" else "pixel_values_videos"
        if pix not in sub:
            continue
        fn = getattr(inner.model, f"get_{modality}_features", None)
        if fn is None or keys is None or any(k not in sub for k in keys):
            return _per_row(adapter.model_type, f"no {modality} encoder inputs known for this family")
        device = next(inner.parameters()).device
        encoded = fn(*(sub[k].to(device) for k in keys), return_dict=True)
        if len(encoded.pooler_output) != sum(sub[counts]):  # not one feature block per item
            return _per_row(adapter.model_type, f"{len(encoded.pooler_output)} {modality} feature blocks "
                                                f"for {sum(sub[counts])} items")
        starts = {p: sum(sub[counts][:i]) for i, p in enumerate(uniq)}
        index = [starts[p] + j for p in rows for j in range(prompt_inputs["_base"][counts][p])]
        out[modality] = features_per_row(encoded, index)
    return out


CHUNK_ELEMENTS = 1 << 22
"""Logit entries (4 M: 16 MB in fp32) processed at once: the fp32 working copy of the
vocabulary-wide distribution never exists for more than this many entries at a time."""


def _tempered(logits: torch.Tensor, temperature: float, suppress: torch.Tensor | None) -> torch.Tensor:
    """fp32 logits of the sampling distribution: divided by the temperature, suppressed ids at -inf."""
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    if suppress is not None:
        x = x.index_fill(-1, suppress, float("-inf"))  # out of place: the model's logits stay intact
    return x


def _entropy(x: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Entropy lse - sum p x of softmax(x); suppressed ids (x = -inf, p = 0) contribute 0 (and no NaN grad)."""
    p = torch.exp(x - lse.unsqueeze(-1))
    return lse - (p * torch.where(torch.isinf(x), torch.zeros_like(x), x)).sum(-1)


def logits_to_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    suppress_ids: Sequence[int] = (),
    with_entropy: bool = False,
    *,
    entropy_grad: bool = True,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(N, T, V) logits -> (N, T) log-probs of `targets` under the sampling distribution.

    Temperature and suppressed ids are applied exactly as the sampler applied them (the sampler
    is given nothing else: see `mmrlvr.rollout.hf.sampling_config`), so the log-probs of sampled
    tokens equal what `generate` drew them from. Computed as `x[target] - logsumexp(x)` in
    blocks of rows and tokens of at most `chunk_elements` logits, so no full-batch fp32 softmax is
    materialised. `entropy_grad=False` computes the entropy without a graph (a metric only).
    """
    n, t, v = logits.shape
    suppress = torch.tensor(list(suppress_ids), dtype=torch.long, device=logits.device) if len(suppress_ids) else None
    rows = max(1, chunk_elements // max(t * v, 1))
    cols = t if rows > 1 else max(1, min(t, chunk_elements // max(v, 1)))
    lp_parts, ent_parts = [], []
    # Blocks come from `split`, not slicing: a sliced block's backward allocates a zero gradient
    # as large as all the logits and adds it up once per block (quadratic in the vocabulary-wide
    # blocks: 8 of 10 s of a 151k-vocabulary update); a split's backward concatenates once.
    for i, row_block in zip(range(0, n, rows), logits.split(rows, dim=0)):
        lp_row, ent_row = [], []
        pieces = row_block.split(cols, dim=1) if cols < t else (row_block,)
        for j, piece in zip(range(0, t, cols), pieces):
            x = _tempered(piece, temperature, suppress)
            lse = torch.logsumexp(x, dim=-1)
            tgt = targets[i : i + rows, j : j + cols].unsqueeze(-1)
            lp_row.append(x.gather(-1, tgt).squeeze(-1) - lse)
            if with_entropy:
                with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                    ent_row.append(_entropy(x, lse))
            del x
        lp_parts.append(torch.cat(lp_row, dim=1))
        if with_entropy:
            ent_parts.append(torch.cat(ent_row, dim=1))
    logp = torch.cat(lp_parts, dim=0)
    return logp, (torch.cat(ent_parts, dim=0) if with_entropy else None)


def completion_logprobs(
    model,
    prompt_inputs: dict,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    suppress_ids: Sequence[int] = (),
    with_entropy: bool = False,
    entropy_grad: bool = True,
    options: ForwardOptions = PLAIN,
    **option_flags: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(N, T) log-probs (and entropies) of the completion tokens given their prompts.

    `options` (`ForwardOptions`, from `train.*`) say how the forward saves memory; a caller may
    name single options as keywords instead (`chunked_head=True`), which override `options`.

    Only the completion positions' logits are computed (`logits_to_keep`); callers micro-batch
    the rows so that those (n, T, V) logits stay bounded. `prompt_once`: each distinct prompt's
    forward once (`prompt_once_logits`) where the rows and the model allow it. `chunked_head`:
    the output layer runs in blocks of positions recomputed in the backward, so the (n, T, V)
    logits never exist (`mmrlvr.models.patches.chunked_head`), where they exceed one block of
    `CHUNK_ELEMENTS`. `recompute_mlp`: the gated MLPs keep 2 of their 4 (n, T, I) tensors for the
    backward (`mmrlvr.models.patches.gated_mlp`). `mask_once`: the attention layers share one
    additive copy of the boolean mask instead of keeping one each
    (`mmrlvr.models.patches.attention_mask`). `recompute_norm`: RMSNorms fed bf16 / fp16 keep only
    their input for the backward (`mmrlvr.models.patches.rms_norm`). The patches are entered here,
    for the length of this one forward, and undone on leaving it (`mmrlvr.models.patches`)."""
    o = dataclasses.replace(options, **option_flags) if option_flags else options
    t = completion_ids.shape[1]
    blocks = o.chunked_head and why_not_chunked(model, completion_ids.numel(), CHUNK_ELEMENTS) is None
    head = output_layer(model) if blocks else None
    with kept_head_input(head) if blocks else contextlib.nullcontext() as kept, \
            recomputed_gated_mlps(model, o.recompute_mlp), masks_once(model, o.mask_once), \
            recomputed_rms_norms(model, o.recompute_norm):
        logits = None
        if o.padding_free:  # one packed sequence of real tokens; it replaces prompt_once's forward
            logits = packed_logits(model, prompt_inputs, completion_ids, completion_mask)
        elif o.prompt_once:
            logits = prompt_once_logits(model, prompt_inputs, completion_ids, completion_mask, suppress_ids)
        if logits is None:
            logits = _joined_logits(model, prompt_inputs, completion_ids, completion_mask)
    targets = completion_ids.to(logits.device)
    if kept is not None:  # (N, t + 1, H) from the joined forward, (1, N * t, H) from the packed one
        hidden = kept["hidden"].reshape(completion_ids.shape[0], -1, kept["hidden"].shape[-1])
        return head_logprobs(head, hidden[:, :t], targets, temperature, suppress_ids, with_entropy,
                             entropy_grad, CHUNK_ELEMENTS)
    return logits_to_logprobs(logits, targets, temperature, suppress_ids, with_entropy, entropy_grad=entropy_grad)


def _joined_inputs(model, prompt_inputs: dict, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> dict:
    """The joined (N, P + T) forward's inputs, each distinct prompt's media encoded once where it can."""
    kw = join_prompt_completion(prompt_inputs, completion_ids, completion_mask, next(model.parameters()).device)
    shared = shared_media_outputs(model, prompt_inputs)
    if shared:
        for key in ("pixel_values", "pixel_values_videos", "pixel_attention_mask"):
            kw.pop(key, None)  # the grids stay: they place the media in the 3-D positions
        kw["mm_encoder_outputs"] = shared
    return kw


def _joined_logits(model, prompt_inputs: dict, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """(N, T, V) completion logits from one forward of the joined prompt + completion rows."""
    kw = _joined_inputs(model, prompt_inputs, completion_ids, completion_mask)
    t = completion_ids.shape[1]
    return model(**kw, logits_to_keep=t + 1, use_cache=False).logits[:, :t]


def packed_logits(model, prompt_inputs: dict, completion_ids: torch.Tensor,
                  completion_mask: torch.Tensor) -> torch.Tensor | None:
    """(N, T, V) completion logits from one forward of the rows' real tokens packed into one
    sequence (`mmrlvr.models.packing`): the same numbers as the joined forward's on every
    completion token, without computing its padding. Raises ConfigError for a family or attention
    that does not pack correctly; None (the joined forward runs) where a completion mask has holes
    (an episode's), which a packed sequence cannot skip the way the padded mask does."""
    why = model_why_not_packed(model)
    if why:
        raise ConfigError(f"train.padding_free=true: {why}; set train.padding_free: false")
    if not is_prefix_mask(completion_mask):
        return None
    kw = _joined_inputs(model, prompt_inputs, completion_ids, completion_mask)
    packed, index = pack_joined(model, kw)
    n, t = completion_ids.shape
    keep = kept_positions(index, prompt_inputs["input_ids"].shape[1], t)
    logits = model(**packed, logits_to_keep=keep, use_cache=False).logits
    return logits.reshape(n, t, logits.shape[-1])


def prompt_once_logits(model, prompt_inputs: dict, completion_ids: torch.Tensor,
                       completion_mask: torch.Tensor, media_ids: Sequence[int] = ()) -> torch.Tensor | None:
    """(N, T, V) logits of the completion positions with each distinct prompt's forward run once.

    Rows of a group repeat one prompt, and a causal model's prompt positions never see the
    completion, so the prompt's hidden states are the same in every row. The U distinct prompts
    minus their last token run once (media included), their KV cache is gathered to the N rows
    (`mmrlvr.rollout.prefill.prompt_cache`: the gradient through it is the sum over each group's
    rows, as with G separate copies), and one forward of (last prompt token + completion) per row
    finishes it.
    Same math as one forward of the joined rows; the floating-point grouping differs (log-probs
    move by ~1e-6). None where it does not apply: rows without their prompt index (`_base`), or
    a reason of `mmrlvr.rollout.prefill.why_not_shared` (no prompt repeated, sharded parameters,
    gradient checkpointing, a family not checked, prompts ending in padding or in one of
    `media_ids`). The prompts' forward goes to the model under DDP's
    wrapper, so each micro-batch still runs one DDP forward on every rank (DDP syncs its buffers
    in each one); the gradient reaches DDP's hooks through the same backward.
    """
    if "_base" not in prompt_inputs:
        return None
    inner = base_model(model)
    rows = list(prompt_inputs["_row_prompt"])
    uniq = sorted(set(rows))
    if why_not_shared(inner, prompt_inputs, len(uniq) < len(rows), media_ids) is not None:
        return None
    device = next(inner.parameters()).device
    base = {k: (v.to(device) if isinstance(v, torch.Tensor) else v)
            for k, v in select_rows(prompt_inputs["_base"], uniq).items() if not k.startswith("_")}
    slot = {p: i for i, p in enumerate(uniq)}
    index = torch.tensor([slot[r] for r in rows], device=device)
    cache, name = prompt_cache(unwrap(model), base, index)
    ids = prompt_inputs["input_ids"].to(device)
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    full_mask = torch.cat([prompt_inputs["attention_mask"].to(device), completion_mask.to(ids.dtype)], dim=1)
    full_positions = inner._prepare_position_ids_for_generation(
        torch.cat([ids, completion_ids], dim=1), {"attention_mask": full_mask, name: cache})
    t = completion_ids.shape[1]
    tail = torch.cat([ids[:, -1:], completion_ids], dim=1)
    out = model(input_ids=tail, attention_mask=full_mask, position_ids=full_positions[..., ids.shape[1] - 1:],
                **{name: cache}, use_cache=True, logits_to_keep=t + 1)
    return out.logits[:, :t]
