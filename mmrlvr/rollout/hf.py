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

from typing import Sequence

import torch
import torch.nn.functional as F

from mmrlvr.data.collate import encode_prompts, model_kwargs, pad_right, repeat_prompts, select_rows
from mmrlvr.models.wrapping import base_model
from mmrlvr.models.adapters import model_adapter
from mmrlvr.rollout.base import RolloutOutput
from mmrlvr.rollout.generation import (  # noqa: F401 - re-exported: callers import them from here
    VISION_TOKENS, SampledLogprobs, _NEUTRAL, _only, _warn_once, _warned, _world_size, checkpoint_generation_config,
    generate_calls, overridden_generation_fields, sampling_config, stop_token_ids, synced_generation, trim_at_stop,
    vision_token_ids)
from mmrlvr.rollout.prefill import prefill_once, why_not_shared
from mmrlvr.rollout.sampler import sampling_processors
from mmrlvr.types import Completion, Sample

class HFRolloutEngine:
    """Samples with the policy's own `generate`; shares the policy's weights, so sync is free."""

    def __init__(self, model, processor):
        self.model = model
        self.processor = processor
        tok = processor.tokenizer
        self.suppress_ids = model_adapter(model).media_token_ids(tok)
        self.stop_ids = stop_token_ids(tok, getattr(model, "generation_config", None))
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]

    def close(self) -> None:
        """Nothing to release: the engine samples from the learner's own module."""

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
