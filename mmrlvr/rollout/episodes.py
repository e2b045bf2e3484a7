"""Episodes: rollouts of several turns, where a registered turn function decides what comes next.

An episode starts like today's rollout: the policy answers the prompt (turn 1, the engine's own
`rollout`). Then, per row, the episode's turn function sees the row so far and returns a `Turn`:
a message to insert (a tool result with text and/or images, or another role's prompt), or the
end. Inserted messages are rendered by the model's own chat template, appended to the row, and
the policy generates the next turn from the whole context; this repeats up to
`rollout.max_turns` policy turns, `rollout.max_episode_tokens` tokens and
`rollout.max_episode_images` inserted images. A turn cut at `rollout.max_new_tokens` is closed
with the end-of-turn token (as context) before the next insert.

Representation (what the learner sees): everything after the prompt is the row's completion,
policy turns and inserted messages in order (`Completion.token_ids`); `Completion.policy_mask`
is 1 on the policy's own tokens and 0 on inserted ones, and the loss mask is the completion
mask times it, so inserted text and images are context only. Inserted images travel with the
completion (`Completion.media`: the processor's pixel values and grid) and are appended to the
row's own media for the learner's forward (`with_inserted_media`). The sampler's log-probs are 0
on inserted tokens. A turn function is named by `rollout.episode`, never by a data row; one
that raises or exceeds `rollout.turn_timeout_s` ends its episode (the reason counts in
`episode/ended_by_error_frac`), never the run.

`single` (the default) is exactly the one-turn rollout: the engine's `rollout`, nothing else.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

import torch

from mmrlvr.data.collate import select_rows
from mmrlvr.data.literal_text import literal_messages
from mmrlvr.rollout.continuation import continue_turn
from mmrlvr.rollout.episode_registry import (EPISODES, Episode, EpisodeState, Turn,  # noqa: F401 - re-exported
                                             register_episode)
from mmrlvr.types import Completion, Sample


def episode_prompts(rollout_cfg, prompts: list[Sample]) -> list[Sample]:
    """The prompts the first turn answers: the episode's `prompt` hook applied (unchanged without one)."""
    ep = episode_for(getattr(rollout_cfg, "episode", "single"))
    args = dict(getattr(rollout_cfg, "episode_args", None) or {})
    return prompts if ep.prompt is None else [ep.prompt(p, args) for p in prompts]


def episode_for(name: str) -> Episode:
    """The registered episode `name` (the built-in ones come with `EPISODES`' first read)."""
    return EPISODES.get(name)


def call_turn(fn, state: EpisodeState, timeout_s: float) -> Turn:
    """The turn function's answer, or an end with reason `error` (it raised, returned something
    else than a Turn) or `timeout`. A timed-out call's thread is left to finish on its own."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        turn = pool.submit(fn, state).result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        return Turn(end=True, reason="timeout")
    except Exception:  # a user's turn function: any failure ends this episode, never the run
        return Turn(end=True, reason="error")
    finally:
        pool.shutdown(wait=False)
    return turn if isinstance(turn, Turn) else Turn(end=True, reason="error")


def message_tokens(processor, message: dict, images, bridge: str) -> dict:
    """Processor outputs (one row) of a message inserted after a policy turn, generation prompt included.

    The text is what the chat template adds for `message` after a conversation (the difference
    of two renderings, so a template's default system turn is not repeated), after `bridge`: what
    the template writes after the end-of-turn token the policy stopped on ("\\n" for Qwen)."""
    base = [{"role": "user", "content": "x"}]
    message = literal_messages([message], processor)[0]  # a caption, hint or tool reply stays text
    before = processor.apply_chat_template(base, tokenize=False)
    after = processor.apply_chat_template([*base, message], add_generation_prompt=True, tokenize=False)
    if not after.startswith(before):
        raise ValueError("the chat template renders a conversation's start differently with a later message")
    text = bridge + after[len(before):]
    kw: dict = {"text": [text], "return_tensors": "pt"}
    if images:
        kw["images"] = list(images)
    return dict(processor(**kw))


def template_bridge(processor, stop_text: str) -> str:
    """What the chat template writes between an assistant turn's end-of-turn token and the next turn."""
    conv = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "ANSWER"}]
    text = processor.apply_chat_template(conv, tokenize=False)
    tail = text.split("ANSWER", 1)[1]
    return tail[len(stop_text):] if tail.startswith(stop_text) else ""


@dataclasses.dataclass
class _Row:
    sample: Sample
    prompt_row: int
    ids: list  # completion tokens so far (policy and inserted)
    policy: list  # 1 per policy token
    lp: list  # sampler log-probs, 0 on inserted tokens
    types: list  # mm token types of the completion tokens
    pixel: list  # inserted images' pixel values
    grid: list  # their grids
    state: EpisodeState
    truncated: bool = False
    ended: str | None = None
    role_tokens: dict = dataclasses.field(default_factory=dict)
    images: list = dataclasses.field(default_factory=list)  # inserted images as given (PIL): token-prompt engines


def run_episodes(engine, prompts: list[Sample], g: int, rollout_cfg, seed: int, step: int | None = None, **rollout_kw):
    """B prompts x G episodes -> the engine's `RolloutOutput`, completions being whole episodes.

    `single`: the engine's rollout untouched (`rollout_kw` passed on: return_logprobs, greedy,
    max_new_tokens). Otherwise turn 1 is that rollout and later turns are generated on the whole
    context of the rows still going by the same engine (`continuation.continue_turn`). `step`: the RL step
    (None: evaluation), for episodes whose phase alternates."""
    ep = episode_for(getattr(rollout_cfg, "episode", "single"))
    if step is None and ep.evaluate is not None:  # an episode that evaluates its own way (prco: observe, then solve)
        return ep.evaluate(engine, prompts, g, rollout_cfg, seed, **rollout_kw)
    phase = "eval" if step is None else (ep.phase(step) if ep.phase else "")
    if ep.turn is not None and phase in ep.shared_first:
        out = repeat_output(engine.rollout(prompts, 1, rollout_cfg, seed=seed, **rollout_kw), g)
    else:
        out = engine.rollout(prompts, g, rollout_cfg, seed=seed, **rollout_kw)
    if ep.turn is None:
        return out
    if not (hasattr(engine, "continue_rows") or hasattr(engine, "continue_contexts")):
        raise ValueError(f"rollout.episode={rollout_cfg.episode!r} needs the hf or the vllm engine")
    tok = engine.processor.tokenizer
    stop_text = tok.convert_ids_to_tokens(engine.stop_ids[0])
    bridge = template_bridge(engine.processor, stop_text)
    limit = image_pixel_limit(engine.processor)
    rows = []
    for i, c in enumerate(out.completions):
        n = len(c.token_ids)
        lp = out.sampler_logprobs[i, :n].tolist() if out.sampler_logprobs is not None else [0.0] * n
        st = EpisodeState(prompts[c.sample_index], [c.text], roles=[ep.first_role], max_pixels=limit, phase=phase,
                          args=dict(getattr(rollout_cfg, "episode_args", None) or {}))
        rows.append(_Row(prompts[c.sample_index], c.sample_index, list(c.token_ids), [1] * n, lp, [0] * n,
                         [], [], st, c.truncated, role_tokens={ep.first_role: n}))
    turn_tokens = rollout_kw.get("max_new_tokens") or rollout_cfg.max_new_tokens
    max_tokens = rollout_cfg.max_episode_tokens or rollout_cfg.max_turns * turn_tokens
    for turn in range(1, rollout_cfg.max_turns + 1):
        going = [r for r in rows if r.ended is None]
        for r in going:
            if turn == rollout_cfg.max_turns:
                r.ended = "max_turns"
        going = [r for r in going if r.ended is None]
        nexts = []
        for r in going:
            t = call_turn(ep.turn, r.state, rollout_cfg.turn_timeout_s)
            if t.end or t.message is None:
                r.ended = t.reason if t.end else "done"
                continue
            if r.state.inserted_images + len(t.images) > rollout_cfg.max_episode_images:
                r.ended = "image_limit"
                continue
            try:
                enc = message_tokens(engine.processor, t.message, t.images, bridge)
            except Exception:  # a message the template or processor refuses: this episode ends
                r.ended = "error"
                continue
            ins = enc["input_ids"][0].tolist()
            types = enc["mm_token_type_ids"][0].tolist() if "mm_token_type_ids" in enc else [0] * len(ins)
            close = [engine.stop_ids[0]] if r.truncated else []  # a turn cut at max_new_tokens is closed (context)
            ins, types = close + ins, [0] * len(close) + types
            if len(r.ids) + len(ins) >= max_tokens:
                r.ended = "token_limit"
                continue
            if t.context_only:
                r.policy, r.lp = [0] * len(r.policy), [0.0] * len(r.lp)
            r.ids += ins
            r.policy += [0] * len(ins)
            r.lp += [0.0] * len(ins)
            r.types += types
            if t.images:
                r.pixel.append(enc["pixel_values"])
                r.grid.append(enc["image_grid_thw"])
                r.images += list(t.images)
                r.state.inserted_images += len(t.images)
            r.state.roles.append(t.role or r.state.roles[-1])
            nexts.append(r)
        if not nexts:
            break
        budget = min(turn_tokens, max_tokens - max(len(r.ids) for r in nexts))
        new = continue_turn(engine, out.prompt_inputs, nexts, rollout_cfg, seed=seed * 7919 + turn,
                            max_new_tokens=max(1, budget), greedy=bool(rollout_kw.get("greedy")))
        for r, (toks, lps, done, text) in zip(nexts, new):
            r.ids += toks
            r.policy += [1] * len(toks)
            r.lp += lps
            r.types += [0] * len(toks)
            r.truncated = not done
            r.state.turns.append(text)
            role = r.state.roles[-1]
            r.role_tokens[role] = r.role_tokens.get(role, 0) + len(toks)
    for r in rows:
        r.ended = r.ended or "max_turns"
    return _episode_output(out, rows, engine.pad_id)


def repeat_output(out, g: int):
    """One response per prompt (B rows) -> each repeated G times in place (B x G rows, groups contiguous)."""
    import copy

    comps = [copy.deepcopy(c) for c in out.completions for _ in range(g)]
    rep = lambda t: None if t is None else t.repeat_interleave(g, dim=0)  # noqa: E731
    return dataclasses.replace(out, completions=comps, completion_ids=rep(out.completion_ids),
                               completion_mask=rep(out.completion_mask), sampler_logprobs=rep(out.sampler_logprobs))


def image_pixel_limit(processor, default: int = 12544) -> int:
    """The most pixels the processor gives one image (`model.max_pixels`, else its own longest_edge)."""
    ip = getattr(processor, "image_processor", None)
    size = getattr(ip, "size", None)
    for value in (getattr(ip, "max_pixels", None), getattr(size, "max_pixels", None),
                  size.get("longest_edge") if hasattr(size, "get") else getattr(size, "longest_edge", None)):
        if value:
            return int(value)
    return default


def _episode_output(out, rows: list, pad_id: int):
    from mmrlvr.data.collate import pad_right
    from mmrlvr.rollout.base import RolloutOutput

    comps = []
    for c, r in zip(out.completions, rows):
        media = {"pixel_values": torch.cat(r.pixel), "image_grid_thw": torch.cat(r.grid)} if r.pixel else None
        comps.append(Completion(c.sample_index, r.state.turns[-1], r.ids, r.truncated, policy_mask=r.policy,
                                media=media, episode=_summary(r)))
    ids, mask = pad_right([c.token_ids for c in comps], pad_id)
    lp = torch.zeros(mask.shape, dtype=torch.float32)
    for i, r in enumerate(rows):
        lp[i, : len(r.lp)] = torch.tensor(r.lp, dtype=torch.float32)
    return RolloutOutput(comps, out.prompt_inputs, ids, mask, lp if out.sampler_logprobs is not None else None)


def _summary(r: _Row) -> dict:
    return {"turns": len(r.state.turns), "ended_by": r.ended, "inserted_images": r.state.inserted_images,
            "roles": list(r.state.roles), "texts": list(r.state.turns), "role_tokens": dict(r.role_tokens)}


ERROR_REASONS = ("error", "timeout")


def episode_metrics(completions: list) -> dict:
    """episode/... of one round: mean turns, inserted images, and what ended the episodes."""
    eps = [c.episode for c in completions if getattr(c, "episode", None)]
    if not eps:
        return {}
    n = len(eps)
    out: dict[str, Any] = {
        "episode/turns_mean": sum(e["turns"] for e in eps) / n,
        "episode/inserted_images_mean": sum(e["inserted_images"] for e in eps) / n,
        "episode/ended_by_error_frac": sum(e["ended_by"] in ERROR_REASONS for e in eps) / n,
    }
    for reason in sorted({e["ended_by"] for e in eps}):
        out[f"episode/ended_by/{reason}"] = sum(e["ended_by"] == reason for e in eps) / n
    return out


def role_reward_metrics(completions: list, rewards: torch.Tensor) -> dict:
    """reward/<role>/mean: the mean reward of the episodes whose scored (last) turn is each role's."""
    flat = rewards.reshape(-1).tolist()
    per: dict[str, list] = {}
    for c, r in zip(completions, flat):
        ep = getattr(c, "episode", None)
        if not ep or r != r:  # NaN: unscorable
            continue
        per.setdefault(ep["roles"][-1], []).append(r)
    return {f"reward/{role}/mean": sum(v) / len(v) for role, v in sorted(per.items())}


def with_inserted_media(inputs: dict, completions: list) -> dict:
    """(N, P) prompt inputs -> the same rows with each completion's inserted images appended to its
    row's media (Qwen-style flat patches split by `image_grid_thw`), for the learner's forward.

    Rows then carry media of their own, so each row's media are encoded on their own (no `_base`)."""
    if not any(getattr(c, "media", None) for c in completions):
        return inputs
    if "pixel_values_videos" in inputs or "image_grid_thw" not in inputs and "pixel_values" in inputs:
        raise ValueError("images inserted by an episode need a Qwen-VL-style family (flat patches, image_grid_thw) "
                         "and image-only prompts")
    n = len(completions)
    rows = [select_rows(inputs, [i]) for i in range(n)]
    pixels, grids = [], []
    for one, c in zip(rows, completions):
        if "pixel_values" in one:
            pixels.append(one["pixel_values"])
            grids.append(one["image_grid_thw"])
        if c.media:
            pixels.append(c.media["pixel_values"])
            grids.append(c.media["image_grid_thw"])
    out = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] == n
           and k in ("input_ids", "attention_mask", "mm_token_type_ids")}
    out["pixel_values"] = torch.cat(pixels)
    out["image_grid_thw"] = torch.cat(grids)
    out["_n_images"] = [inputs["_n_images"][i] + (len(c.media["image_grid_thw"]) if c.media else 0)
                        for i, c in enumerate(completions)]
    out["_n_videos"] = list(inputs["_n_videos"])
    if "_model_type" in inputs:
        out["_model_type"] = inputs["_model_type"]
    return out


def policy_mask_of(completions: list, shape) -> torch.Tensor | None:
    """(N, T) 1 on the policy's own tokens, 0 on inserted ones and padding; None for one-turn rows."""
    if not any(getattr(c, "policy_mask", None) is not None for c in completions):
        return None
    mask = torch.zeros(shape, dtype=torch.long)
    for i, c in enumerate(completions):
        pm = c.policy_mask if c.policy_mask is not None else [1] * len(c.token_ids)
        mask[i, : len(pm)] = torch.tensor(pm, dtype=torch.long)
    return mask
