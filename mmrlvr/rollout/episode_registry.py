"""The episode registry: what a turn function returns (`Turn`), what it reads (`EpisodeState`), and
the registered episodes (`EPISODES`, `register_episode`).

A leaf module, apart from the episode runner (`mmrlvr.rollout.episodes`), so that an episode
registers without importing the runner. The built-in episodes (`tools`, `refine`, `hill`, `prco`)
live in their method folders (`mmrlvr/methods/<name>/episode.py`), a higher layer: `EPISODES`
names `mmrlvr.methods.builtin` as its plug-in package, imported on the registry's first read, so the
runner and validation see every built-in episode without importing a method.
`mmrlvr.rollout.episodes` re-exports every name here, so user code keeps
`from mmrlvr.rollout.episodes import Turn, ...`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from mmrlvr.registry import Registry
from mmrlvr.types import Sample


@dataclasses.dataclass(frozen=True)
class Turn:
    """A turn function's answer. `message`: a chat message to insert (its `content` a string, or a
    list of parts where `{"type": "image"}` parts take `images` in order); None with `end` True
    ends the episode, `reason` saying why (counted in `episode/ended_by/<reason>`)."""

    message: dict | None = None
    images: tuple = ()
    end: bool = False
    reason: str = "done"
    role: str | None = None  # the role of the policy turn that follows (default: the episode's)
    context_only: bool = False  # the policy's turns so far become context (loss mask 0, not trained)


@dataclasses.dataclass
class EpisodeState:
    """What a turn function reads: the prompt, the policy's turns so far and what was inserted."""

    sample: Sample
    turns: list  # the policy's turn texts, in order
    inserted_images: int = 0
    roles: list = dataclasses.field(default_factory=list)  # the role of each policy turn
    max_pixels: int = 12544  # the processor's per-image pixel limit (what an inserted image may use)
    phase: str = ""  # the episode's phase this step (`Episode.phase`; "eval" in evaluation)
    args: dict = dataclasses.field(default_factory=dict)  # rollout.episode_args


@dataclasses.dataclass(frozen=True)
class Episode:
    """A registered episode: its turn function (None: one turn) and the role of its first turn."""

    turn: Callable[[EpisodeState], Turn] | None
    first_role: str = "policy"
    phase: Callable[[int], str] | None = None  # step -> phase name, for episodes that alternate
    shared_first: tuple = ()  # phases whose first turn is one response per prompt, shared by its G episodes
    args: tuple = ()  # the names rollout.episode_args may set (text or number values)
    prompt: Callable | None = None  # (sample, args) -> the sample the first turn answers (a role's own prompt)
    evaluate: Callable | None = None  # (engine, prompts, k, rollout_cfg, seed, **kw) -> output, for evaluation
    check: Callable[[Any], list] | None = None  # cfg -> one line per setting the episode refuses (validation)


EPISODES: Registry = Registry("episode", plugins="mmrlvr.methods.builtin")  # the method folders register theirs


def register_episode(name: str, first_role: str = "policy", phase: Callable[[int], str] | None = None,
                     shared_first: tuple = (), args: tuple = (), **hooks):
    """`@register_episode("tools")` on a turn function `fn(state: EpisodeState) -> Turn` (or None:
    one turn); `phase` maps the RL step to a phase the turn function reads (`state.phase`); in the
    phases named by `shared_first` the G episodes of a prompt continue one first response (G
    refinements of one answer); `hooks`: Episode's `prompt`, `evaluate`, `check`."""
    def deco(fn):
        EPISODES.register(name)(Episode(fn, first_role, phase, tuple(shared_first), tuple(args), **hooks))
        return fn
    return deco


EPISODES.register("single")(Episode(None))
