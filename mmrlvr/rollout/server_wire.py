"""What travels between the server engine and `mmrlvr rollout-server`, as JSON: prompts with their
decoded media, sampling fields, and the completions that come back (checked before use).

The client decodes media exactly as the colocated engine does (`vllm_inputs.vllm_request`: the
learner's images and video frames) and sends pixels, never paths: PNG for images (lossless, so the
server's processor sees the learner's RGB values), raw uint8 arrays for video frames. Nothing is
unpickled on either side.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np

from mmrlvr.rollout.server_http import RolloutServerError
from mmrlvr.rollout.vllm_inputs import SampledText


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_request(req: dict) -> dict:
    """A `vllm_request` dict (prompt, multi_modal_data with PIL images / (frames, metadata) videos) -> JSON."""
    out: dict = {"prompt": req["prompt"]}
    data = req.get("multi_modal_data") or {}
    if data.get("image"):
        pngs = []
        for im in data["image"]:
            buf = io.BytesIO()
            im.save(buf, format="PNG")
            pngs.append(_b64(buf.getvalue()))
        out["images"] = pngs
    if data.get("video"):
        out["videos"] = [{"frames": _b64(np.ascontiguousarray(frames, dtype=np.uint8).tobytes()),
                          "shape": list(frames.shape), "meta": meta} for frames, meta in data["video"]]
    return out


def decode_request(obj: dict, limits=None) -> dict:
    """`encode_request`'s JSON -> the prompt dict vLLM's `LLM.generate` takes (server side).

    `limits` (`server_guard.RequestLimits`): images per prompt and pixels per image are checked from
    the PNG header, before any image is decoded (a 13000x13000 PNG is small on the wire, 0.5 GB decoded)."""
    from PIL import Image

    if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
        raise ValueError("each request needs a 'prompt' string")
    req: dict = {"prompt": obj["prompt"]}
    data: dict = {}
    if obj.get("images"):
        if limits is not None:
            limits.check_count("images in one prompt", len(obj["images"]), limits.max_images)
        try:
            images = [Image.open(io.BytesIO(base64.b64decode(s))) for s in obj["images"]]
        except OSError as exc:  # not an image PIL reads
            raise ValueError(f"an image is not readable: {exc}") from None
        for im in images:
            if limits is not None:
                limits.check_image(*im.size)
        data["image"] = [im.convert("RGB") for im in images]
    if obj.get("videos"):
        vids = []
        for v in obj["videos"]:
            shape = tuple(int(x) for x in v["shape"])
            frames = np.frombuffer(base64.b64decode(v["frames"]), dtype=np.uint8)
            if frames.size != math.prod(shape) or len(shape) != 4:
                raise ValueError(f"video frames of {frames.size} bytes do not fill shape {shape}")
            vids.append((frames.reshape(shape), dict(v["meta"])))
        data["video"] = vids
    if data:
        req["multi_modal_data"] = data
    return req


def encode_outputs(raw: list[list[SampledText]]) -> list:
    return [[{"token_ids": list(c.token_ids), "text": c.text, "finish_reason": c.finish_reason,
              "logprobs": list(c.logprobs)} for c in outs] for outs in raw]


def decode_outputs(obj, n_prompts: int, group_size: int, url: str, vocab_size: int, *, max_tokens: int | None = None,
                   suppress_ids=(), tokenizer=None) -> list[list[SampledText]]:
    """The server's completions, checked: n_prompts lists of group_size completions, each with int
    token ids inside the vocabulary, none of them a suppressed (vision) id, at most `max_tokens` of
    them, and one finite log-prob <= 0 per token. Anything else is one RolloutServerError line
    (never a crash deep in the update).

    The text is decoded here from the ids, never taken from the server: the reward scores exactly the
    tokens the learner trains on. It is the text vLLM's detokenizer gives the colocated engine: special
    tokens skipped, and an incomplete UTF-8 character at the end (U+FFFD after a plain decode) left out."""

    def bad(why: str):
        raise RolloutServerError(f"rollout server {url}: malformed /generate answer ({why})")

    banned = frozenset(int(i) for i in suppress_ids)
    if not isinstance(obj, list) or len(obj) != n_prompts:
        bad(f"expected {n_prompts} prompts' completions, got {len(obj) if isinstance(obj, list) else type(obj).__name__}")
    out = []
    for i, outs in enumerate(obj):
        if not isinstance(outs, list) or len(outs) != group_size:
            bad(f"prompt {i}: expected {group_size} completions, got {len(outs) if isinstance(outs, list) else type(outs).__name__}")
        group = []
        for j, c in enumerate(outs):
            where = f"prompt {i} completion {j}"
            if not isinstance(c, dict):
                bad(f"{where}: not an object")
            toks, lps, text = c.get("token_ids"), c.get("logprobs"), c.get("text")
            if not isinstance(toks, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in toks):
                bad(f"{where}: token_ids must be a list of ids in [0, {vocab_size})")
            if max_tokens is not None and len(toks) > max_tokens:
                bad(f"{where}: {len(toks)} tokens, more than the {max_tokens} new tokens asked for")
            if banned and not banned.isdisjoint(toks):
                bad(f"{where}: suppressed token ids {sorted(banned.intersection(toks))[:5]} (the sampler never allows them)")
            if not isinstance(lps, list) or len(lps) != len(toks):
                bad(f"{where}: expected {len(toks)} log-probs, got {len(lps) if isinstance(lps, list) else type(lps).__name__}")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x <= 1e-4 for x in lps):
                bad(f"{where}: log-probs must be finite numbers <= 0")
            if not isinstance(text, str):
                bad(f"{where}: text must be a string")
            finish = c.get("finish_reason")
            if finish is not None and not isinstance(finish, str):
                bad(f"{where}: finish_reason must be a string or null")
            if tokenizer is not None:
                text = tokenizer.decode(toks, skip_special_tokens=True).rstrip("\ufffd")
            group.append(SampledText(toks, text, finish, [float(x) for x in lps]))
        out.append(group)
    return out
