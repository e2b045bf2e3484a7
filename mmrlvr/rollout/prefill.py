"""Each prompt's forward once per group: the KV cache of a prompt is computed for its B rows and
repeated G times before `generate` samples the B x G completions.

`generate(num_return_sequences=G)` repeats every prompt G times *before* its first forward, so
the prompt's tokens and media go through the model G times (at 112 px and 8-token answers that
prefill is most of a rollout). Here the prompt minus its last token is run once per prompt, the
cache and the model's per-batch position state are repeated G times, and `generate` continues
from the cache: it processes the last prompt token for every row and samples as before, so the
random draws are the same ones in the same order. What changes is the floating-point grouping of
the prompt's forward (B rows instead of B x G): logits move by ~1e-6 and the sampled tokens stay
the same (tests/models/test_family_prefill.py checks every tiny family). vLLM can do the same
with its prefix cache; `rollout.shared_prefill=false` gives generate's own prefill back.
"""

from __future__ import annotations

import torch

from mmrlvr.models.adapters import model_adapter
from mmrlvr.models.wrapping import base_model, params_sharded

# per-token inputs cut with the prompt (everything else - media, grids, sizes - goes to the prefill)
_PER_TOKEN = ("input_ids", "attention_mask")


def cache_kwarg(model) -> str:
    """The name a forward (and `generate`) takes the KV cache by: `cache` from transformers 5.2x
    (`past_key_values` then warns), `past_key_values` before (the vLLM job's 5.19)."""
    import inspect

    return "cache" if "cache" in inspect.signature(base_model(model).forward).parameters else "past_key_values"


def why_not_shared(model, inputs: dict, repeated: bool, never_sampled) -> str | None:
    """None when each prompt's forward can run once for its rows (rollout and learner alike);
    otherwise the reason the joined / generate's own forward is used.

    inputs: the (U, L) left-padded prompts. repeated: some prompt has more than one row.
    never_sampled: the media token ids (the rows that continue from the cache carry no media)."""
    if not repeated:
        return "no prompt repeated"
    if params_sharded(model):
        return "sharded parameters (each forward is a collective every rank must run)"
    if base_model(model).training and _checkpointed(base_model(model)):
        return "gradient checkpointing (checkpointed layers drop the cache)"
    if not model_adapter(model).shared_prefill:
        return f"the {model_adapter(model).model_type} family is not checked for it"
    ids, mask = inputs["input_ids"], inputs.get("attention_mask")
    if ids.shape[1] < 2:
        return "prompts of one token"
    if mask is not None and not bool(mask[:, -1].all()):
        return "prompts padded on the right"
    if bool(torch.isin(ids[:, -1], torch.tensor(list(never_sampled), dtype=ids.dtype, device=ids.device)).any()):
        return "a prompt ending in a media token"
    return None


def _checkpointed(model) -> bool:
    """Gradient checkpointing on in any layer (what transformers' `is_activation_checkpointing`
    reads; that name is from 5.2x, the vLLM job's 5.19 has only the one 5.24 deprecates)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def prompt_cache(module, inputs: dict, rows: torch.Tensor):
    """The KV cache of the U prompts in `inputs` minus their last token, gathered to N rows.

    inputs: (U, L) processor outputs on the model's device, media included (encoded here, once).
    rows: (N,) which prompt each row continues. The gather is an indexing op, so a gradient
    through the cache is the sum over each prompt's rows, as with N separate copies; per-row state
    the forward leaves on the model (Qwen's mRoPE offsets, `rope_deltas`) is gathered alike.
    module: what runs the forward (the model, or the module inside DDP's wrapper). Returns the
    cache and the keyword the model takes it by."""
    from transformers import DynamicCache

    base = base_model(module)
    adapter = model_adapter(base)
    per_token = (*_PER_TOKEN, *adapter.token_keys)
    # the positions generate's own prefill would use (mRoPE's 3-D ones for Qwen), cut like the tokens
    positions = base._prepare_position_ids_for_generation(inputs["input_ids"], dict(inputs))
    head = {k: (v[:, :-1] if k in per_token and isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    cache, name = DynamicCache(config=base.config), cache_kwarg(base)
    module(**head, position_ids=positions[..., :-1], **{name: cache}, use_cache=True, logits_to_keep=1)
    cache.batch_select_indices(rows)  # (U, heads, L-1, d) -> (N, heads, L-1, d)
    state_owner = getattr(base, "model", None)
    for state in adapter.batch_state:
        value = getattr(state_owner, state, None)
        if isinstance(value, torch.Tensor) and value.shape[0] == inputs["input_ids"].shape[0]:
            setattr(state_owner, state, value[rows.to(value.device)])
    return cache, name


@torch.no_grad()
def prefill_once(model, inputs: dict, group_size: int) -> dict:
    """Run the B prompts minus their last token, repeat the cache G times; returns the kwargs of the
    `generate` call that continues (B*G rows of input_ids and attention mask, and the cache).

    inputs: (B, L) processor outputs on the model's device. The media are encoded here and not
    passed on: the rows that continue hold no media token (`why_not_shared` checks the last one);
    per-token media keys (mm_token_type_ids, token_type_ids) stay behind for the same reason."""
    ids = inputs["input_ids"]
    rows = torch.arange(ids.shape[0], device=ids.device).repeat_interleave(group_size)
    cache, name = prompt_cache(model, inputs, rows)
    out = {k: inputs[k][rows] for k in _PER_TOKEN if isinstance(inputs.get(k), torch.Tensor)}
    out[name] = cache
    return out
