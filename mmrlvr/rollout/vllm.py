"""Rollouts with vLLM (extra `vllm`, GPUs): same contract as the HF engine, colocated with training.

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

from typing import Sequence

import torch

from mmrlvr.data.collate import encode_prompts, pad_right, prompt_texts
from mmrlvr.rollout.hf import RolloutOutput, stop_token_ids, vision_token_ids
from mmrlvr.rollout.weight_names import sync_pairs, vllm_param_name
from mmrlvr.types import Completion, Sample

DEFAULT_FPS = 2.0  # Qwen2-VL/2.5-VL's default sampling rate, what qwen-vl-utils assumes


def _image(ref):
    try:  # references (paths, bytes, dicts) decode here, as in encode_prompts
        from mmrlvr.data.media import load_image
    except ImportError:
        return ref
    return ref if hasattr(ref, "size") and hasattr(ref, "convert") else load_image(ref)


def _video(ref, sample: Sample):
    """A (T, H, W, 3) uint8 array and its frame rate, from a VideoRef or decoded frames."""
    import numpy as np

    fps = getattr(ref, "fps", None) or sample.meta.get("fps") or DEFAULT_FPS
    if hasattr(ref, "path"):  # mmrlvr.data.media.VideoRef: decode with the project's decoder
        from mmrlvr.data.media import load_video

        ref = load_video(ref)
    if isinstance(ref, (list, tuple)):
        ref = np.stack([np.asarray(f.convert("RGB")) for f in ref])
    return np.asarray(ref), float(fps)


def vllm_request(prompt: str, sample: Sample) -> dict:
    """One vLLM prompt: the chat-templated text and its media, as vLLM's Qwen processors expect.

    The template already holds one `<|vision_start|><|image_pad|><|vision_end|>` per image;
    vLLM expands each placeholder to the image's token count. Video frame rates go to the HF
    processor through `mm_processor_kwargs` (they set the temporal positions of mRoPE).
    """
    req: dict = {"prompt": prompt}
    data: dict = {}
    if sample.images:
        data["image"] = [_image(im) for im in sample.images]
    if sample.videos:
        vids = [_video(v, sample) for v in sample.videos]
        data["video"] = [v for v, _ in vids]
        req["mm_processor_kwargs"] = {"fps": [f for _, f in vids]}
    if data:
        req["multi_modal_data"] = data
    return req


class VLLMRolloutEngine:
    """`rollout`/`generate`/`sync_weights` as `HFRolloutEngine`, sampling with vLLM."""

    def __init__(self, model_path: str, processor, model_config, *, gpu_memory_utilization: float = 0.3,
                 max_model_len: int = 4096, dtype: str = "bfloat16", sleep: bool = True, seed: int = 0,
                 enforce_eager: bool = False, limit_mm_per_prompt: dict | None = None, llm=None):
        import torch.distributed as dist

        self.processor = processor
        tok = processor.tokenizer
        self.suppress_ids = vision_token_ids(tok, model_config.model_type)  # the family's media tokens
        self.stop_ids = stop_token_ids(tok)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.stop_ids[0]
        banned = set(self.suppress_ids)
        self.allowed_ids = [i for i in range(len(tok)) if i not in banned]
        self.model_type = model_config.model_type
        self.tied = bool(getattr(model_config, "tie_word_embeddings", False))
        self.sleep_enabled = sleep
        self._asleep = False
        if llm is None:
            from vllm import LLM

            colocated = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
            llm = LLM(
                model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len, enable_sleep_mode=sleep, seed=seed,
                enforce_eager=enforce_eager, logprobs_mode="processed_logprobs",
                limit_mm_per_prompt=limit_mm_per_prompt or {"image": 4, "video": 1},
                distributed_executor_backend="external_launcher" if colocated else None,
            )
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
        engine = self.llm.llm_engine
        try:
            return engine.model_executor.driver_worker.worker.model_runner.model
        except AttributeError:
            return None

    def sync_weights(self, model) -> None:
        """Copy the policy's current weights (LoRA merged) into vLLM; the next rollout uses them."""
        pairs = sync_pairs(model)
        self._wake()
        target = self._vllm_model()
        if target is not None:
            self.check_names(pairs, dict(target.named_parameters()))
            target.load_weights(pairs)
        else:  # vLLM running its workers in other processes: ship the call
            self.llm.apply_model(lambda m: m.load_weights(pairs))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self._go_to_sleep()

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
        from vllm import SamplingParams

        return SamplingParams(
            n=group_size, temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p, top_k=0 if greedy else (sampling.top_k or 0),
            min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            max_tokens=max_new_tokens or sampling.max_new_tokens, stop_token_ids=self.stop_ids,
            allowed_token_ids=self.allowed_ids, seed=seed, logprobs=0, skip_special_tokens=True,
        )

    def generate(self, samples: Sequence[Sample], group_size: int, sampling, seed: int) -> list[Completion]:
        return self.rollout(samples, group_size, sampling, seed).completions

    def rollout(self, samples: Sequence[Sample], group_size: int, sampling, seed: int, greedy: bool = False,
                max_new_tokens: int | None = None, return_logprobs: bool = False) -> RolloutOutput:
        texts = prompt_texts(self.processor, samples)
        requests = [vllm_request(t, s) for t, s in zip(texts, samples)]
        # one seed per prompt: a prompt's G samples do not depend on which other prompts share the batch
        params = [self.sampling_params(sampling, group_size, seed * 100_003 + i, greedy, max_new_tokens)
                  for i in range(len(samples))]
        self._wake()
        outs = self.llm.generate(requests, params, use_tqdm=False)
        self._go_to_sleep()
        completions, logprobs = [], []
        for i, out in enumerate(outs):
            for c in out.outputs:
                toks = list(c.token_ids)
                completions.append(Completion(i, c.text, toks, truncated=c.finish_reason == "length"))
                logprobs.append([d[t].logprob for d, t in zip(c.logprobs or [], toks)])
        ids, mask = pad_right([c.token_ids for c in completions], self.pad_id)
        sampler_lp = None
        if return_logprobs:  # (N, T), zero on padding, as the HF engine returns them
            sampler_lp = torch.zeros(ids.shape, dtype=torch.float32)
            for i, row in enumerate(logprobs):
                sampler_lp[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
        return RolloutOutput(completions, encode_prompts(self.processor, samples), ids, mask, sampler_lp)
