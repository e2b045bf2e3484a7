"""Rollouts with transformers `generate`: every prompt's forward once (`prefill.py`), G samples each.

`rollout.generate_max_rows` bounds the rows (whole groups) of one `generate` call, and so its KV
cache: a step's prompts are generated in successive calls. The prompts are encoded once for the
whole rollout and each call takes its rows at the rollout's padded width, so every row is fed
the same inputs whatever the split. The draws: with `rollout.sampler=inverse_cdf` a row's uniform
numbers come from one per-rollout stream indexed by the row (`sampler.InverseCdfSampler`), so a
seed gives the same completions for any `generate_max_rows` (up to the float rounding of a
different batch shape in the model's kernels; equal on the CPU tests). With `multinomial`,
transformers draws for the call's rows together from the global generator, seeded once before
the first call: other splits sample other (equally distributed) tokens. Greedy decoding draws
nothing.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from mmrlvr.data.collate import encode_prompts, model_kwargs, pad_right, repeat_prompts, select_rows
from mmrlvr.models.wrapping import base_model, params_sharded
from mmrlvr.models.adapters import QWEN_MEDIA_TOKENS, adapter_for, model_adapter
from mmrlvr.rollout.prefill import prefill_once, why_not_shared
from mmrlvr.rollout.sampler import sampling_processors
from mmrlvr.types import Completion, Sample

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


@dataclass
class RolloutOutput:
    """What every engine returns. `sampler_logprobs` is part of the contract: the log-probs of the
    sampled tokens under the distribution the sampler drew them from after the learner's own
    temperature and suppressed ids (HF: recorded from generate's scores; vLLM: processed_logprobs),
    0 on padding. The step reads them as pi_old where the sampler is the learner and to correct
    the sampler/learner gap otherwise."""

    completions: list[Completion]  # N = B * G, groups contiguous
    prompt_inputs: dict  # processor outputs for the B prompts (left padded)
    completion_ids: torch.Tensor  # (N, T) right padded
    completion_mask: torch.Tensor  # (N, T)
    sampler_logprobs: torch.Tensor | None = None  # (N, T) log-probs the sampler drew with
    policy_version: int | None = None  # server engine: weight updates the server had loaded when it sampled
    gen_seconds: float | None = None  # generated ahead (rollout.async_steps): the generation's own seconds


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


class HFRolloutEngine:
    """Samples with the policy's own `generate`; shares the policy's weights, so sync is free."""

    def __init__(self, model, processor):
        self.model = model
        self.processor = processor
        tok = processor.tokenizer
        self.suppress_ids = model_adapter(model).media_token_ids(tok)
        self.stop_ids = stop_token_ids(tok, getattr(model, "generation_config", None))
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]

    def sync_weights(self, model) -> None:
        self.model = model

    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        return self.rollout(samples, group_size, sampling, seed).completions

    def _check_sampling(self, sampling, greedy: bool) -> None:
        found = overridden_generation_fields(getattr(base_model(self.model), "generation_config", None), sampling)
        if found:
            listed = ", ".join(f"{k}={v!r}" for k, v in sorted(found.items()))
            _warn_once(
                f"the model's generation_config sets {listed}; rollouts ignore it and sample from "
                "rollout.temperature/top_k/top_p only, so that the training log-probs are the sampler's"
            )
        if not greedy and (sampling.top_k > 0 or sampling.top_p < 1.0):
            _warn_once(
                f"rollout.top_k={sampling.top_k}, rollout.top_p={sampling.top_p}: the PPO ratio is taken on "
                "the full tempered distribution (as verl and TRL), so truncated sampling is slightly off-policy"
            )

    @torch.no_grad()
    def rollout(
        self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
        max_new_tokens: int | None = None, return_logprobs: bool = True,
    ) -> RolloutOutput:
        """Sample G completions per prompt. The sampled tokens' log-probs always come back
        (`return_logprobs` is kept for the engines' shared signature; the HF engine ignores it)."""
        prompt_inputs = encode_prompts(self.processor, samples)
        self._check_sampling(sampling, greedy)
        calls = generate_calls(len(samples), group_size, getattr(sampling, "generate_max_rows", None))
        was_training = self.model.training
        self.model.eval()
        torch.manual_seed(seed)  # multinomial draws: the global stream, once for the whole rollout
        try:
            parts = [self._generate(prompt_inputs if len(calls) == 1 else select_rows(prompt_inputs, list(prompts)),
                                    group_size, sampling, seed, greedy, max_new_tokens,
                                    slice(prompts.start * group_size, prompts.stop * group_size), len(samples) * group_size)
                     for prompts in calls]
        finally:
            if was_training:
                self.model.train()
        token_lists = [toks for part in parts for toks in part[0]]
        finished = [done for part in parts for done in part[1]]
        # (N, T): T the most steps a call ran (as one call's `generate` output is wide), right padded
        t = max(lp.shape[1] for _, _, lp in parts)
        ids, mask = pad_right(token_lists, self.pad_id)
        ids = F.pad(ids, (0, t - ids.shape[1]), value=self.pad_id)
        mask = F.pad(mask, (0, t - mask.shape[1]))
        sampler_lp = torch.cat([F.pad(lp, (0, t - lp.shape[1])) for _, _, lp in parts])
        texts = self.processor.tokenizer.batch_decode(token_lists, skip_special_tokens=True)
        completions = [
            Completion(i // group_size, text, toks, truncated=not done)
            for i, (text, toks, done) in enumerate(zip(texts, token_lists, finished))
        ]
        return RolloutOutput(completions, prompt_inputs, ids, mask, sampler_lp)

    def rollout_segmented(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, prefix_tokens: int,
                          keep, greedy: bool = False, max_new_tokens: int | None = None, hidden: bool = True):
        """`rollout` stopped at `prefix_tokens` for `keep(view) -> list[bool]`, the kept rows continued
        with their cache and random stream: `mmrlvr.rollout.segmented`."""
        from mmrlvr.rollout.segmented import rollout_segmented

        return rollout_segmented(self, samples, group_size, sampling, seed, prefix_tokens, keep, greedy=greedy,
                                 max_new_tokens=max_new_tokens, hidden=hidden)

    def _generate(self, prompt_inputs: dict, group_size: int, sampling, seed: int, greedy: bool,
                  max_new_tokens: int | None, rows: slice, total: int) -> tuple[list, list, torch.Tensor]:
        """One `generate` call for some prompts (B', L) at the rollout's width: rows `rows` of the
        rollout's `total`. Returns each row's tokens up to its stop token, whether it stopped, and
        the (B' x G, T') sampler log-probs."""
        inputs, gen_config, recorder, draw = self._prepared(prompt_inputs, group_size, sampling, seed, greedy,
                                                            max_new_tokens or sampling.max_new_tokens, rows, total)
        out = self._call_generate(inputs, gen_config, [recorder, *draw])
        new = out[:, prompt_inputs["input_ids"].shape[1]:].cpu()
        ids, mask, lengths, finished = trim_at_stop(new, self.stop_ids, self.pad_id)
        token_lists = [row[:n].tolist() for row, n in zip(new, lengths.tolist())]
        return token_lists, finished.tolist(), recorder.result(new, mask)

    def _prepared(self, prompt_inputs: dict, group_size: int, sampling, seed: int, greedy: bool,
                  max_new_tokens: int, rows: slice, total: int) -> tuple[dict, object, SampledLogprobs, list]:
        """What one `generate` call takes (see `_generate`): its model kwargs (B' x G rows after the
        shared prefill or the greedy loop's repeat; B' with generate's own num_return_sequences),
        GenerationConfig, log-prob recorder and draw processors (the sampler, holding the rows'
        random stream)."""
        device = next(self.model.parameters()).device
        gen_config = sampling_config(
            sampling, group_size=group_size, max_new_tokens=max_new_tokens,
            stop_ids=self.stop_ids, pad_id=self.pad_id, suppress_ids=self.suppress_ids, greedy=greedy,
        )
        recorder = SampledLogprobs(1.0 if greedy else sampling.temperature)
        draw = [] if greedy or sampling.sampler != "inverse_cdf" else sampling_processors(sampling, rows, total, seed)
        inputs = model_kwargs(prompt_inputs, device)
        shared = sampling.shared_prefill and why_not_shared(self.model, inputs, group_size > 1, self.suppress_ids) is None
        if shared:  # each prompt's forward once; generate continues B*G rows from the repeated cache
            inputs = prefill_once(self.model, inputs, group_size)
            gen_config.num_return_sequences = 1
        elif not gen_config.do_sample and group_size > 1:  # the greedy loop takes no num_return_sequences: G rows here
            inputs = model_kwargs(repeat_prompts(prompt_inputs, group_size), device)
            gen_config.num_return_sequences = 1
        return inputs, gen_config, recorder, draw

    def _call_generate(self, inputs: dict, gen_config, processors: list, stopping: list = ()):
        """`generate` with exactly `gen_config`, the rollout's logits processors and any stopping
        criteria beside the config's."""
        from transformers import LogitsProcessorList, StoppingCriteriaList

        with _only(self.model, gen_config):
            return self.model.generate(**inputs, generation_config=gen_config,
                                       logits_processor=LogitsProcessorList(processors),
                                       stopping_criteria=StoppingCriteriaList(stopping),
                                       synced_gpus=synced_generation(self.model))

    @torch.no_grad()
    def continue_rows(self, inputs: dict, sampling, seed: int, max_new_tokens: int, greedy: bool = False) -> list[tuple]:
        """One more policy turn of each row of `inputs` (left padded model inputs of whole episode
        contexts, media included): per row (token ids, sampler log-probs, stopped, text)."""
        from transformers import LogitsProcessorList

        device = next(self.model.parameters()).device
        gen_config = sampling_config(sampling, group_size=1, max_new_tokens=max_new_tokens, stop_ids=self.stop_ids,
                                     pad_id=self.pad_id, suppress_ids=self.suppress_ids, greedy=greedy)
        recorder = SampledLogprobs(1.0 if greedy else sampling.temperature)
        draw = [] if greedy or sampling.sampler != "inverse_cdf" else sampling_processors(sampling)
        was_training = self.model.training
        self.model.eval()
        torch.manual_seed(seed)
        with _only(self.model, gen_config):
            out = self.model.generate(**model_kwargs(inputs, device), generation_config=gen_config,
                                      logits_processor=LogitsProcessorList([recorder, *draw]),
                                      synced_gpus=synced_generation(self.model))
        if was_training:
            self.model.train()
        new = out[:, inputs["input_ids"].shape[1]:].cpu()
        ids, mask, lengths, finished = trim_at_stop(new, self.stop_ids, self.pad_id)
        lp = recorder.result(new, mask)
        toks = [row[:n].tolist() for row, n in zip(new, lengths.tolist())]
        texts = self.processor.tokenizer.batch_decode(toks, skip_special_tokens=True)
        return [(t, lp[i, : len(t)].tolist(), bool(finished[i]), texts[i]) for i, t in enumerate(toks)]


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
