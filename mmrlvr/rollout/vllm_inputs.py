"""What the vLLM engine hands vLLM, as pure functions: requests, seeds, vocabulary, limits.

Kept apart from `mmrlvr.rollout.vllm` so that everything that decides *what* vLLM samples from
(which pixels, which seeds, which token ids) is tested without vLLM installed.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from mmrlvr.data.collate import encode_prompts, pad_right, video_limits
from mmrlvr.data.media import decode_video, fit_total_pixels, load_image
from mmrlvr.types import Completion, Sample

SEED_STRIDE = 100_003  # a prime above any B*G: step seeds never share a stream with each other
DEFAULT_MAX_MODEL_LEN = 4096  # used when the model allows more (sizes the KV cache)


def request_seeds(seed: int, n_prompts: int, group_size: int) -> list[int]:
    """One vLLM seed per prompt, spaced by G.

    vLLM draws sample j of a request with seed `s + j` (its parallel sampling), so prompt i's
    seed must leave room for its G samples: with `seed * STRIDE + i * G` every (prompt, sample)
    of a step has its own stream, and steps (seed, seed + 1) never overlap while B*G < STRIDE.
    A prompt's samples still do not depend on which other prompts follow it in the batch.
    """
    if n_prompts * group_size >= SEED_STRIDE:
        raise ValueError(f"{n_prompts} prompts x G={group_size} samples exceed {SEED_STRIDE} seeds per step")
    return [seed * SEED_STRIDE + i * group_size for i in range(n_prompts)]


def child_seeds(request_seeds_: Sequence[int], group_size: int) -> list[int]:
    """The seeds vLLM actually samples with: request seed + j for sample j (N = B*G)."""
    return [s + j for s in request_seeds_ for j in range(group_size)]


def allowed_token_ids(vocab_size: int, suppress_ids: Sequence[int]) -> list[int]:
    """Every id of the model's (padded) output vocabulary except the suppressed ones.

    The learner's softmax runs over all `vocab_size` logits (Qwen pads 151,665 tokenizer ids to
    151,936 rows), with only `suppress_ids` at -inf; vLLM must normalise over the same set.
    """
    banned = set(suppress_ids)
    return [i for i in range(vocab_size) if i not in banned]


def model_vocab_size(model_config) -> int:
    """The output vocabulary size (rows of lm_head) from a transformers config."""
    text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    return int(getattr(text, "vocab_size", None) or model_config.vocab_size)


def resolve_max_model_len(requested: int | None, model_config) -> int:
    """`rollout.vllm_max_model_len`, checked against the model's positions; None -> min(4096, model)."""
    text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    limit = getattr(text, "max_position_embeddings", None)
    if requested is None:
        return min(DEFAULT_MAX_MODEL_LEN, limit) if limit else DEFAULT_MAX_MODEL_LEN
    if limit and requested > limit:
        raise ValueError(f"rollout.vllm_max_model_len={requested} exceeds the model's max_position_embeddings={limit}")
    return requested


def _size(sub) -> dict:
    size = getattr(sub, "size", None)
    if size is None:
        return {}
    get = size.get if hasattr(size, "get") else lambda k: getattr(size, k, None)
    return {k: int(get(k)) for k in ("shortest_edge", "longest_edge") if get(k) is not None}


def processor_kwargs(processor) -> dict:
    """The learner's pixel limits for vLLM's HF processor (`LLM(mm_processor_kwargs=...)`).

    `load_policy` writes `model.min_pixels`/`max_pixels` and the video limits into the learner's
    processor (`size` = {shortest_edge: min pixels, longest_edge: max pixels}); vLLM builds its
    own processor from the model directory, so without these it resizes images differently and
    samples from other pixels than the learner scores.
    """
    out: dict = {}
    image = _size(getattr(processor, "image_processor", None))
    video = _size(getattr(processor, "video_processor", None))
    if image:
        out["images_kwargs"] = {"size": image}
    vp = getattr(processor, "video_processor", None)
    if video:
        out["videos_kwargs"] = {"size": video}
    if getattr(vp, "cap_pixels_per_frame", None) is not None:  # load_policy turns qwen-vl-utils' cap on
        out.setdefault("videos_kwargs", {})["cap_pixels_per_frame"] = bool(vp.cap_pixels_per_frame)
    return out


def vllm_videos(videos: Sequence, limits: dict) -> list[tuple]:
    """One sample's videos as vLLM's Qwen processors take them: [((T, H, W, 3) uint8, metadata)].

    Decoded exactly as `collate.video_inputs` decodes them for the learner (`decode_video` with
    the run's limits, then the sample's total-pixel budget): a VideoRef, a `DecodedVideo` from the
    prefetching loop, a `ShuffledVideo` or an array. The metadata tells the processor which frames
    of which timeline these are (mRoPE's temporal positions use the sampled fps) and that they
    are sampled already.
    """
    decoded = fit_total_pixels(
        [decode_video(v, max_frames=limits.get("max_frames"), max_pixels=limits.get("max_pixels")) for v in videos],
        limits.get("total_pixels"),
    )
    out = []
    for frames, meta in decoded:
        fps = float(meta["fps"])
        out.append((frames, {
            "fps": fps, "total_num_frames": int(meta["span_frames"]), "frames_indices": list(meta["frame_indices"]),
            "duration": meta["span_frames"] / fps, "video_backend": "mmrlvr", "do_sample_frames": False,
        }))
    return out


def vllm_request(prompt: str, sample: Sample, processor=None) -> dict:
    """One vLLM prompt: the chat-templated text and its media, decoded as the learner decodes them.

    The template already holds one `<|vision_start|><|image_pad|><|vision_end|>` per image;
    vLLM expands each placeholder to the image's token count.
    """
    req: dict = {"prompt": prompt}
    data: dict = {}
    if sample.images:
        data["image"] = [load_image(im) for im in sample.images]
    if sample.videos:
        lim = video_limits(processor) if processor is not None else {}
        data["video"] = vllm_videos(sample.videos, lim)
    if data:
        req["multi_modal_data"] = data
    return req


def placeholder_ids(model_config) -> dict[str, int]:
    """modality -> the token id the chat template writes once per image/video ("image", "video")."""
    out = {}
    for modality in ("image", "video"):
        tid = getattr(model_config, f"{modality}_token_id", None)
        if tid is not None:
            out[modality] = int(tid)
    return out


def collapse_placeholders(ids: Sequence[int], placeholders: dict[str, int]) -> tuple[list[int], dict[str, int]]:
    """Token ids whose media placeholders the HF processor expanded (one per visual token) -> one
    placeholder per image/video, as the chat template writes them, with the count per modality.

    vLLM's Qwen-VL processors expand each `<|image_pad|>` / `<|video_pad|>` of a token prompt to
    the item's token count themselves, so a prompt given as token ids must carry them unexpanded.
    Runs are separated by `<|vision_end|><|vision_start|>`, so a run is one item."""
    out: list[int] = []
    counts = {m: 0 for m in placeholders}
    by_id = {tid: m for m, tid in placeholders.items()}
    for i, t in enumerate(ids):
        if t in by_id and i > 0 and ids[i - 1] == t:
            continue
        if t in by_id:
            counts[by_id[t]] += 1
        out.append(int(t))
    return out, counts


def continuation_request(token_ids: Sequence[int], sample: Sample, inserted_images: Sequence, placeholders: dict,
                         processor=None) -> dict:
    """One vLLM token prompt continuing an episode: the learner's ids of prompt + completion so far
    (media placeholders collapsed, `collapse_placeholders`) and the media in order, the prompt's own
    (decoded as `vllm_request` decodes them) then the images the episode inserted.

    Fails with one line when the placeholders do not match the media one to one (a family whose
    processor writes more than one placeholder run per item, such as Qwen3-VL's timestamped videos)."""
    ids, counts = collapse_placeholders(token_ids, placeholders)
    data = dict(vllm_request("", sample, processor).get("multi_modal_data", {}))
    if inserted_images:
        data["image"] = [*data.get("image", []), *inserted_images]
    for modality in placeholders:
        have = len(data.get(modality, []))
        if counts[modality] != have:
            raise ValueError(f"episode on the vLLM engine: {counts[modality]} {modality} placeholder runs in the "
                             f"context for {have} {modality}s (a family whose processor writes one run per item is needed)")
    req: dict = {"prompt_token_ids": ids}
    if data:
        req["multi_modal_data"] = data
    return req


def sampling_fields(sampling, group_size: int, seed: int, greedy: bool, max_new_tokens: int | None,
                    stop_ids: Sequence[int]) -> dict:
    """vLLM SamplingParams fields for one request (plain values: the server engine sends them as JSON).

    What the learner's log-probs assume: the rollout temperature, top-p/top-k, no penalties; the
    allowed ids and processed log-probs are added where SamplingParams is built."""
    return dict(
        n=group_size, temperature=0.0 if greedy else float(sampling.temperature),
        top_p=1.0 if greedy else float(sampling.top_p), top_k=0 if greedy else int(sampling.top_k or 0),
        min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
        max_tokens=int(max_new_tokens or sampling.max_new_tokens), stop_token_ids=[int(i) for i in stop_ids],
        seed=int(seed),
    )


class SampledText(NamedTuple):
    """One completion as vLLM returns it: its token ids, text, finish reason and the sampled tokens' log-probs."""

    token_ids: list
    text: str
    finish_reason: str | None
    logprobs: list


def rollout_output(processor, samples: Sequence[Sample], raw: Sequence[Sequence[SampledText]], pad_id: int,
                   return_logprobs: bool, prompt_inputs: dict | None = None):
    """vLLM's per-request completions -> the engines' `RolloutOutput`: N = B*G completions, groups
    contiguous, ids right padded; `return_logprobs`: (N, T) float32 sampler log-probs, 0 on padding.
    `prompt_inputs`: the samples' processor outputs when the caller encoded them already (a server pool)."""
    from mmrlvr.rollout.base import RolloutOutput

    completions, logprobs = [], []
    for i, outs in enumerate(raw):
        for c in outs:
            toks = list(c.token_ids)
            completions.append(Completion(i, c.text, toks, truncated=c.finish_reason == "length"))
            logprobs.append(c.logprobs)
    ids, mask = pad_right([c.token_ids for c in completions], pad_id)
    sampler_lp = None
    if return_logprobs:
        sampler_lp = torch.zeros(ids.shape, dtype=torch.float32)
        for i, row in enumerate(logprobs):
            sampler_lp[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    if prompt_inputs is None:
        prompt_inputs = encode_prompts(processor, samples)
    return RolloutOutput(completions, prompt_inputs, ids, mask, sampler_lp)
