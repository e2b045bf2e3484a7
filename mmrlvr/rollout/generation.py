"""The pieces of a `generate` call every rollout shares: the complete GenerationConfig it samples
from (nothing inherited from a checkpoint), the stop ids and the ids never sampled (every engine
builds them here), the sampler's log-probs recorded as tokens are drawn, the split of a rollout
into calls, and the trim at the first stop token.

`hf.HFRolloutEngine` and `segmented.rollout_segmented` both build on these, so they live below both
(the vLLM and server engines take their stop and media ids from here, not from the HF engine).
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from mmrlvr.models.adapters import QWEN_MEDIA_TOKENS, adapter_for
from mmrlvr.models.wrapping import base_model, params_sharded

VISION_TOKENS = QWEN_MEDIA_TOKENS


def vision_token_ids(tokenizer, model_type: str | None = None) -> list[int]:
    """Ids a policy must never sample: feeding them back breaks the image-token bookkeeping.
    Which tokens these are is the family's (`mmrlvr.models.adapters`; Qwen's without a type)."""
    return adapter_for(model_type).media_token_ids(tokenizer)


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    """The checkpoint's generation-config EOS ids, then the chat template's end tokens. Every engine
    (HF, vLLM, the rollout server's client) builds its stop ids here from the same two inputs."""
    ids = []
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    for e in eos if isinstance(eos, (list, tuple)) else [eos]:
        if e is not None:
            ids.append(int(e))
    for t in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.get_vocab().get(t)
        if tid is not None and tid not in ids:
            ids.append(tid)
    return ids


def checkpoint_generation_config(model_path):
    """The `generation_config.json` of a local model directory, or None (no file, a hub id, a
    `tiny:` name): the vLLM engine has a path, not the HF model, and needs its EOS ids too."""
    import os

    if not model_path or not os.path.isfile(os.path.join(str(model_path), "generation_config.json")):
        return None
    from transformers import GenerationConfig

    return GenerationConfig.from_pretrained(str(model_path))


# Generation fields that change the distribution a token is drawn from, with their neutral value.
# The learner reproduces only temperature and the suppressed ids, so rollouts never take these
# from a checkpoint's generation_config (Qwen2/2.5-VL-Instruct ship repetition_penalty=1.05,
# top_k=1, top_p=0.001, temperature=0.1); a checkpoint that sets one is reported once.
_NEUTRAL = {
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "min_p": None, "top_h": None, "bad_words_ids": None, "sequence_bias": None, "min_length": 0,
    "min_new_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "begin_suppress_tokens": None, "exponential_decay_length_penalty": None, "guidance_scale": None,
    "watermarking_config": None, "renormalize_logits": False, "num_beams": 1,
}
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def overridden_generation_fields(generation_config, sampling) -> dict:
    """Fields of a checkpoint's generation_config that would have changed sampling, with values.

    temperature/top_k/top_p count only where they differ from the rollout settings used instead.
    """
    if generation_config is None:
        return {}
    found = {}
    for key, neutral in _NEUTRAL.items():
        value = getattr(generation_config, key, None)
        if value is not None and value != neutral and value != [] and value != {}:
            found[key] = value
    if getattr(generation_config, "do_sample", None):
        for key in ("temperature", "top_k", "top_p"):
            value = getattr(generation_config, key, None)
            if value is not None and value != getattr(sampling, key):
                found[key] = value
    return found


def sampling_config(sampling, *, group_size: int, max_new_tokens: int, stop_ids: list[int], pad_id: int,
                    suppress_ids: list[int], greedy: bool = False):
    """The complete GenerationConfig rollouts sample from: nothing else is inherited. With
    `sampling.sampler` inverse_cdf it is generate's greedy loop and the rollout adds
    `sampler.sampling_processors` (the same temperature, top-k and top-p, then the draw).

    Sampled: softmax(logits / temperature) with `suppress_ids` at -inf, restricted by top-k/top-p
    when set. The training log-probs reproduce temperature and suppression; the PPO ratio is taken
    on the full tempered distribution (as verl and TRL do), so top-k/top-p < full make rollouts
    slightly off-policy (reported once).
    """
    from transformers import GenerationConfig

    kw = dict(
        max_new_tokens=max_new_tokens, eos_token_id=stop_ids,
        pad_token_id=pad_id, suppress_tokens=list(suppress_ids) or None, use_cache=True,
        **{k: v for k, v in _NEUTRAL.items() if v is not None},
    )
    if greedy or sampling.sampler == "inverse_cdf":
        # inverse_cdf: generate's greedy loop; `sampling_processors` temper, cut and draw (sampler.py).
        # The greedy loop refuses num_return_sequences > 1: the caller passes the G rows.
        return GenerationConfig(do_sample=False, **kw)
    # top_k=0 and top_p=1.0 are explicit: unset fields fall back to transformers' global defaults
    # (top_k=50), which would sample from another distribution.
    return GenerationConfig(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k,
                            top_p=sampling.top_p, num_return_sequences=group_size, **kw)


def synced_generation(model) -> bool:
    """Must `generate` keep stepping until every rank is done (`synced_gpus`)? With sharded
    parameters each decoding step is a collective, so a rank whose sequences all stopped early
    would leave the others waiting in the all-gather. transformers turns this on by itself only
    for modules it marks as FSDP-managed, which accelerate's FSDP2 preparation does not do."""
    return _world_size() > 1 and params_sharded(model)


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@contextlib.contextmanager
def _only(model, generation_config):
    """Make `generate` see `generation_config` and not the checkpoint's: transformers fills every
    field left unset from `model.generation_config`, so that one is swapped for the call."""
    inner = base_model(model)
    saved = inner.generation_config
    inner.generation_config = generation_config
    try:
        yield
    finally:
        inner.generation_config = saved


class SampledLogprobs:
    """A logits processor that records each sampled token's log-prob under the sampling
    distribution, holding one (N, V) step at a time (output_scores would keep all T of them).

    transformers runs custom processors after the suppression processors and before the
    temperature warper, so the temperature is applied here, as the learner applies it. At call
    t + 1 the ids hold the token drawn at step t, which is read off the previous distribution.
    """

    def __init__(self, temperature: float):
        self.temperature = float(temperature)
        self._prev: torch.Tensor | None = None  # (N, V) log-softmax of the previous step
        self.steps: list[torch.Tensor] = []  # per step (N,) log-probs of the drawn tokens

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        x = scores.float()
        self._prev = torch.log_softmax(x / self.temperature if self.temperature != 1.0 else x, dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self._prev is not None:
            self.steps.append(self._prev.gather(-1, tokens.unsqueeze(-1).to(self._prev.device)).squeeze(-1).cpu())
            self._prev = None

    def result(self, new: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, T) log-probs of the generated ids `new`, 0 where `mask` is 0."""
        if self._prev is not None and len(self.steps) < new.shape[1]:
            self._take(new[:, len(self.steps)])
        lp = torch.stack(self.steps, dim=1) if self.steps else torch.zeros(new.shape[0], 0)
        return lp[:, : new.shape[1]] * mask


def generate_calls(prompts: int, group_size: int, max_rows: int | None) -> list[range]:
    """The prompts of each `generate` call: at most `max_rows` rows of whole groups (one group
    when a group alone is larger), all in one call without a bound."""
    per = prompts if max_rows is None else max(1, max_rows // max(1, group_size))
    return [range(s, min(prompts, s + per)) for s in range(0, prompts, max(1, per))]


def trim_at_stop(new: torch.Tensor, stop_ids: list[int], pad_id: int):
    """(N, T) generated ids -> (ids, mask, lengths, finished): each completion is kept up to and
    including its first stop token (in the loss mask); everything after it is padding, masked out.
    A row without a stop token is truncated (`finished` False) and keeps all T tokens."""
    is_stop = torch.isin(new, torch.tensor(stop_ids, dtype=new.dtype))
    finished = is_stop.any(dim=1)
    lengths = torch.where(finished, is_stop.int().argmax(dim=1) + 1, new.shape[1])
    mask = (torch.arange(new.shape[1]) < lengths[:, None]).long()
    ids = torch.where(mask.bool(), new, torch.full_like(new, pad_id))
    return ids, mask, lengths, finished
