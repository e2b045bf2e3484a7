"""Reward functions as TRL and EasyR1 users already write them, recognised by their signature.

mmrlvr's own verifier is `fn(completion: str, sample) -> Verdict | float in [0, 1]`. Three other
shapes are common enough that a user should not have to rewrite them:

- TRL's `reward_funcs`: `fn(completions, **kwargs) -> list[float | None]`, batched, with the
  prompts, the completion token ids and the dataset's columns as keyword arguments; `None` means
  "does not apply to this item" (TRL sums the terms with nansum, so it adds nothing).
- EasyR1's batch `compute_score(reward_inputs: list[dict]) -> list[dict]` (`response`,
  `response_length`, `ground_truth` in; `overall` plus named sub-scores out).
- EasyR1's sequential `compute_score(predict_str, ground_truth) -> dict | float`.

Each is adapted to the one per-item call, on a batch of one: the verifier pool's time bound then
holds per item, and one item's failure stays that item's. Scores of the TRL and EasyR1 shapes are
any finite number (TRL's `reward_len` returns -abs(20 - len)); only mmrlvr's own shape is held to
[0, 1]. TRL's completions arrive in its standard (plain text) format, the prompt as the text of
the chat's last user turn.
"""

from __future__ import annotations

import inspect
from typing import Callable

from mmrlvr.types import Verdict

STYLES = ("mmrlvr", "trl", "easyr1_batch", "easyr1")
NOT_APPLICABLE = "not applicable (the reward returned None)"


class RewardSignatureError(TypeError):
    """A reward function whose parameters match none of the shapes above."""


def reward_style(fn: Callable) -> str:
    """Which shape `fn` has, by its parameters' names and kinds; raises `RewardSignatureError`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read, take it as ours
        return "mmrlvr"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in positional]
    if names[:1] == ["completions"] or (not names and any(p.name == "completions" for p in params)):
        return "trl"
    if names[:1] in (["reward_inputs"], ["reward_input"]):
        return "easyr1_batch"
    if len(names) >= 2 and names[1] in ("ground_truth", "ground_truths", "solution"):
        return "easyr1"
    required = [p for p in positional if p.default is p.empty]
    if len(required) <= 2 and (len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)):
        return "mmrlvr"
    shown = ", ".join(p.name for p in params) or "no parameters"
    raise RewardSignatureError(
        f"{getattr(fn, '__name__', fn)!r} takes ({shown}); expected fn(completion, sample) (mmrlvr), "
        "fn(completions, **kwargs) (TRL) or compute_score(reward_inputs) / compute_score(predict_str, "
        "ground_truth) (EasyR1)")


def _prompt_text(sample) -> str:
    """The text of the last user turn: what a TRL reward function sees as the prompt."""
    for message in reversed(getattr(sample, "messages", ()) or ()):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(part.get("text", "") for part in content or () if isinstance(part, dict)
                            and part.get("type") == "text")
    return ""


def _columns(sample) -> dict:
    """The sample's data as TRL's per-column keyword arguments: the reference under the names
    TRL datasets use for it, then the task's own fields (meta)."""
    ref = getattr(sample, "reference", None)
    out = {"reference": ref, "solution": ref, "ground_truth": ref, "answer": ref,
           "sample_id": getattr(sample, "id", None)}
    out.update(getattr(sample, "meta", None) or {})
    return out


def _from_easyr1(result) -> Verdict | float:
    if isinstance(result, dict) and "overall" in result:
        parts = {k: v for k, v in result.items() if k != "overall"}
        return Verdict(result["overall"], "", parts)
    return result


def _trl_call(fn: Callable, completion, sample):
    ids = getattr(completion, "token_ids", None)
    kwargs = {k: [v] for k, v in _columns(sample).items()}
    return fn(completions=[str(completion)], prompts=[_prompt_text(sample)],
              completion_ids=[list(ids) if ids is not None else None], **kwargs)


def _trl_result(out) -> Verdict | float:
    values = list(out)
    if len(values) != 1:
        raise ValueError(f"returned {len(values)} rewards for 1 completion")
    return Verdict(0.0, NOT_APPLICABLE) if values[0] is None else values[0]


def _easyr1_batch_call(fn: Callable, completion, sample):
    ids = getattr(completion, "token_ids", None)
    item = {"response": str(completion), "response_length": len(ids) if ids is not None else None,
            "ground_truth": getattr(sample, "reference", None)}
    return fn([item])


def _easyr1_batch_result(out) -> Verdict | float:
    values = list(out)
    if len(values) != 1:
        raise ValueError(f"returned {len(values)} scores for 1 input")
    return _from_easyr1(values[0])


SHAPES = {  # style -> (call fn on one item, read what it returned)
    "trl": (_trl_call, _trl_result),
    "easyr1_batch": (_easyr1_batch_call, _easyr1_batch_result),
    "easyr1": (lambda fn, completion, sample: fn(str(completion), getattr(sample, "reference", None)), _from_easyr1),
}


async def _then(awaitable, read: Callable):
    return read(await awaitable)


def adapt(fn: Callable) -> Callable:
    """`fn` as a per-item `(completion, sample)` verifier; `.unbounded` marks the shapes whose
    scores are any finite number. An `async def` reward of any shape gives back an awaitable,
    which `safe_verify` awaits under the verifier time-out."""
    style = reward_style(fn)
    if style == "mmrlvr":
        return fn
    call, read = SHAPES[style]

    def verify(completion, sample):
        out = call(fn, completion, sample)
        return _then(out, read) if inspect.isawaitable(out) else read(out)

    verify.__name__ = getattr(fn, "__name__", "reward")
    verify.original = fn  # not __wrapped__: inspect.signature would follow it back to fn's shape
    if hasattr(fn, "warmup"):
        verify.warmup = fn.warmup
    if hasattr(fn, "eval_metric"):
        verify.eval_metric = fn.eval_metric
    verify.unbounded = True
    verify.style = style
    return verify
