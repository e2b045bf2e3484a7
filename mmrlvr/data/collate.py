"""Turn samples into model inputs through the model's own processor and chat template.

Prompts are left padded so that every completion starts at the same column; groups of G
completions share one processed prompt, which is repeated (not re-processed) per completion.
Samples hold media references; this is where images are decoded (`load_image`), one batch at a
time, so a dataset never keeps decoded pixels for the whole run.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import torch

from mmrlvr.data.literal_text import literal_messages
from mmrlvr.data.media import MediaError, decode_video, describe, fit_total_pixels, load_image, processor_metadata
from mmrlvr.models.adapters import adapter_for
from mmrlvr.types import Sample


def prompt_texts(processor, samples: Sequence[Sample]) -> list[str]:
    """The chat template's rendering of each sample's messages, their text made literal first
    (`literal_text`: a question that spells `<|image_pad|>` stays text, never a vision token)."""
    return [
        processor.apply_chat_template(literal_messages(s.messages, processor), add_generation_prompt=True,
                                      tokenize=False)
        for s in samples
    ]


def encode_prompts(processor, samples: Sequence[Sample]) -> dict:
    """Processor outputs for a batch of prompts, left padded, with per-sample media counts.

    Image references are decoded here (a `MediaError` names the file that failed); PIL images,
    e.g. from `decode_samples` run ahead in a background thread, pass through unchanged. Media the
    processor itself refuses (a ValueError from it) become a `MediaError` naming the batch's
    samples, so callers drop or skip them like undecodable files instead of dying.
    """
    images = [load_image(im) for s in samples for im in s.images]
    videos = [v for s in samples for v in s.videos]
    processor.tokenizer.padding_side = "left"
    kwargs: dict = {"text": prompt_texts(processor, samples), "padding": True, "return_tensors": "pt"}
    adapter = adapter_for(getattr(processor, "model_type", None))
    if images:
        kwargs["images"] = images
        if adapter.nested_images:  # one list per prompt
            it = iter(images)
            kwargs["images"] = [[next(it) for _ in s.images] for s in samples]
    if videos:
        kwargs.update(video_inputs(processor, samples))
    try:
        inputs = dict(processor(**kwargs))
    except ValueError as exc:
        names = ", ".join(f"{s.id} ({', '.join(describe(m) for m in (*s.images, *s.videos))})" for s in samples
                          if s.images or s.videos)
        raise MediaError(f"the processor refused the media of sample(s) {names[:300]}: {str(exc)[:200]}") from None
    inputs["_model_type"] = adapter.model_type
    if images:
        record_image_sizes(processor, samples, images, inputs.get("image_grid_thw"))
    inputs["_n_images"] = [len(s.images) for s in samples]
    inputs["_n_videos"] = [len(s.videos) for s in samples]
    return inputs


def video_limits(processor) -> dict:
    """Decode-time bounds: `processor.video_limits` (set by `load_policy` from the config) and the
    video processor's own per-frame pixel cap, so nothing is decoded larger than it is used."""
    limits = dict(getattr(processor, "video_limits", None) or {})
    size = getattr(getattr(processor, "video_processor", None), "size", None)
    longest = size.get("longest_edge") if hasattr(size, "get") else getattr(size, "longest_edge", None)
    if longest and not limits.get("max_pixels"):
        limits["max_pixels"] = int(longest)
    return limits


def video_inputs(processor, samples: Sequence[Sample]) -> dict:
    """Decode every sample's videos and return the processor's video kwargs.

    Frames are sampled by us (`load_video`), so the processor must not sample again
    (`do_sample_frames=False`) and gets each video's metadata: from it transformers derives the
    sampled fps and so the temporal position ids (`second_per_grid_ts`, Qwen3-VL timestamps).
    """
    lim = video_limits(processor)
    decoded = []
    for s in samples:
        one = [decode_video(v, max_frames=lim.get("max_frames"), max_pixels=lim.get("max_pixels")) for v in s.videos]
        decoded += fit_total_pixels(one, lim.get("total_pixels"))
    return {"videos": [f for f, _ in decoded], "video_metadata": [processor_metadata(m) for _, m in decoded],
            "do_sample_frames": False}


def record_image_sizes(processor, samples: Sequence[Sample], images: list, grid_thw) -> None:
    """Fill `meta["image_size"]` and `meta["input_size"]` (width, height) for samples that ask.

    Grounding samples carry an `input_size` key: a model answering in pixels answers in the
    processor-resized image, known only once its processor has seen the decoded image.
    """
    patch = getattr(getattr(processor, "image_processor", None), "patch_size", None)
    if grid_thw is None or patch is None:
        return
    j = 0
    for s in samples:
        if "input_size" in s.meta and s.images:
            _, gh, gw = (int(v) for v in grid_thw[j])
            s.meta["image_size"] = list(images[j].size)
            s.meta["input_size"] = [gw * patch, gh * patch]
        j += len(s.images)


def repeat_prompts(inputs: dict, g: int) -> dict:
    """(B, ...) prompt inputs -> (B*G, ...), each prompt repeated g times contiguously.

    The result remembers which prompt each row repeats (`_base`, `_row_prompt`), so a forward can
    encode each prompt's media once per group instead of once per row.
    """
    if g == 1:
        return inputs
    n = len(inputs["_n_images"])
    src = inputs if "_base" in inputs else {**inputs, "_base": inputs, "_row_prompt": list(range(n))}
    return select_rows(src, [r for r in range(n) for _ in range(g)])


def select_rows(inputs: dict, rows: list[int]) -> dict:
    """Keep the given sequences (and their media) of a batch of prompt inputs.

    Media follow the family's layout (`mmrlvr.models.adapters`): Qwen's flat patches split per
    item by `*_grid_thw`, one entry per image (Gemma 3, LLaVA-OneVision), or per row (Idefics3)."""
    adapter = adapter_for(inputs.get("_model_type"))
    row_keys = ("input_ids", "attention_mask", *adapter.token_keys)
    if adapter.layout == "per_row":
        row_keys += ("pixel_values", "pixel_attention_mask")
    out = {k: inputs[k][rows] for k in dict.fromkeys(("input_ids", "attention_mask", "mm_token_type_ids", *row_keys))
           if k in inputs}
    for kind, counts in (("image", inputs["_n_images"]), ("video", inputs["_n_videos"])):
        pix, grid = f"pixel_values{'_videos' if kind == 'video' else ''}", f"{kind}_grid_thw"
        if pix not in inputs or pix in out:
            continue
        starts = [0, *itertools.accumulate(counts)]
        keep = [j for r in rows for j in range(starts[r], starts[r] + counts[r])]
        if not keep:
            continue
        if adapter.layout == "per_image":
            for key in (pix, *(adapter.per_image_keys if kind == "image" else ())):
                if key in inputs:
                    out[key] = inputs[key][keep]
            if kind == "image" and "batch_num_images" in inputs:
                out["batch_num_images"] = torch.tensor([counts[r] for r in rows])
            continue
        per_media = list(torch.split(inputs[pix], inputs[grid].prod(dim=1).tolist()))
        out[pix] = torch.cat([per_media[j] for j in keep])
        out[grid] = inputs[grid][keep]
        if kind == "video" and "second_per_grid_ts" in inputs:  # one per video, not per row
            out["second_per_grid_ts"] = torch.as_tensor(inputs["second_per_grid_ts"])[keep]
    out["_n_images"] = [inputs["_n_images"][r] for r in rows]
    out["_n_videos"] = [inputs["_n_videos"][r] for r in rows]
    if "_model_type" in inputs:
        out["_model_type"] = inputs["_model_type"]
    if "_base" in inputs:
        out["_base"] = inputs["_base"]
        out["_row_prompt"] = [inputs["_row_prompt"][r] for r in rows]
    return out


def model_kwargs(inputs: dict, device: torch.device | str | None = None) -> dict:
    """Drop bookkeeping keys and move tensors to the device."""
    out = {}
    for k, v in inputs.items():
        if k.startswith("_"):
            continue
        out[k] = v.to(device) if (device is not None and isinstance(v, torch.Tensor)) else v
    return out


def join_prompt_completion(
    prompt_inputs: dict, completion_ids: torch.Tensor, completion_mask: torch.Tensor, device=None
) -> dict:
    """Concatenate left-padded prompts (N, P) with right-padded completions (N, T), on `device`.

    The (N, P + T) inputs of one teacher-forced forward, shared by the learner's log-probs, the
    token signals and the attention maps of `mmrlvr.viz` (so none of them imports another's layer)."""
    kw = model_kwargs(prompt_inputs, device)
    device = kw["input_ids"].device
    completion_ids = completion_ids.to(device)
    completion_mask = completion_mask.to(device)
    kw["input_ids"] = torch.cat([kw["input_ids"], completion_ids], dim=1)
    kw["attention_mask"] = torch.cat([kw["attention_mask"], completion_mask.to(kw["attention_mask"].dtype)], dim=1)
    for key in ("mm_token_type_ids", "token_type_ids"):  # per-token media markers: completions are text
        if key in kw:
            kw[key] = torch.cat([kw[key], completion_token_types(kw, key, completion_ids)], dim=1)
    return kw


def completion_token_types(kw: dict, key: str, completion_ids: torch.Tensor) -> torch.Tensor:
    """(N, T) media markers of completion tokens: 0 (text), except the media placeholders an
    episode inserted (a tool's image), which take the type the prompt gives the same token id.
    Sampled tokens are never media ids (they are suppressed), so one-turn rows are all 0."""
    types = torch.zeros_like(completion_ids, dtype=kw[key].dtype)
    prompt_types = kw[key][:, : kw[key].shape[1]]
    marked = prompt_types != 0
    if marked.any():
        prompt_ids = kw["input_ids"][:, : prompt_types.shape[1]]
        for tid, typ in set(zip(prompt_ids[marked].tolist(), prompt_types[marked].tolist())):
            types = types.masked_fill(completion_ids == tid, typ)
    return types


def pad_right(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lists of token ids -> (N, T) ids and mask, right padded."""
    t = max((len(s) for s in seqs), default=0)
    t = max(t, 1)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask
