"""What the rollout server checks before an endpoint runs: the key, and how much a request may ask.

`Guard` wraps the app (plain ASGI, so it works under any ASGI server and is testable without one):
a POST without the key is answered 401, a body larger than `max_body` bytes 413, by its
Content-Length before any of it is read, or as soon as a streamed body passes the limit.

`RequestLimits` are the per-request bounds the learner would apply too: completions per prompt,
new tokens, images per prompt and pixels per image (the learner's own limit, `data.media`), and the
weight channel's timeout. A request over one is refused with one line (HTTP 400), never served.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mmrlvr.rollout.server_key import authorized

SAMPLING_KEYS = frozenset({"n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                           "frequency_penalty", "max_tokens", "stop_token_ids", "seed"})  # `vllm_inputs.sampling_fields`
OPEN_METHODS = ("GET", "HEAD")


class BodyTooLarge(Exception):
    """A streamed request body passed the server's limit."""


@dataclass(frozen=True)
class RequestLimits:
    max_n: int = 64
    max_tokens: int = 4096
    max_prompts: int = 1024
    max_images: int = 16
    max_pixels: int = 89_478_485  # the learner's `data.media.MAX_IMAGE_PIXELS`
    max_timeout_s: float = 3600.0
    max_body: int = 512 * 2**20

    def check_sampling(self, fields) -> dict:
        """One request's sampling fields, refused unless known keys and within the limits."""
        if not isinstance(fields, dict):
            raise ValueError("each sampling entry must be an object")
        unknown = sorted(set(fields) - SAMPLING_KEYS)
        if unknown:
            raise ValueError(f"sampling: unknown fields {unknown}; allowed: {sorted(SAMPLING_KEYS)}")
        for key, hi in (("n", self.max_n), ("max_tokens", self.max_tokens)):
            v = fields.get(key, 1)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
                raise ValueError(f"sampling.{key}={v!r}: expected an integer in [1, {hi}] (this server's limit)")
        return dict(fields)

    def check_count(self, what: str, n: int, hi: int) -> None:
        if n > hi:
            raise ValueError(f"{what}: {n} is more than this server's limit of {hi}")

    def check_image(self, width: int, height: int) -> None:
        if width * height > self.max_pixels:
            raise ValueError(f"an image of {width}x{height} pixels is over this server's limit of "
                             f"{self.max_pixels} pixels (the learner's)")

    def timeout(self, value) -> float:
        """The weight channel's timeout: the caller's, at most this server's (it holds the lock that long)."""
        try:
            t = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"timeout={value!r}: expected a number of seconds") from None
        if not 0 < t <= self.max_timeout_s:
            raise ValueError(f"timeout={value!r}: expected seconds in (0, {self.max_timeout_s:g}] (this server's limit)")
        return t


class Guard:
    """ASGI middleware: the key on every POST (and any other non-GET), and the body-size limit."""

    def __init__(self, app, key: str, max_body: int):
        self.app, self.key, self.max_body = app, key, int(max_body)

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") in OPEN_METHODS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if not authorized(headers.get(b"authorization"), self.key):
            return await _refuse(send, 401, "missing or wrong key: send 'Authorization: Bearer <key>' "
                                            "(rollout.server_key or MMRLVR_ROLLOUT_KEY on the trainer)")
        length = headers.get(b"content-length")
        try:
            declared = int(length) if length is not None else None
        except ValueError:
            return await _refuse(send, 400, "Content-Length is not a number")
        if declared is not None and declared > self.max_body:
            return await _refuse(send, 413, f"body of {declared} bytes is over this server's limit of {self.max_body}")
        seen = 0
        started = False

        async def counted():
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise BodyTooLarge(f"body passed this server's limit of {self.max_body} bytes")
            return message

        async def tracked(message):
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge as exc:
            if not started:
                await _refuse(send, 413, str(exc))


async def _refuse(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
