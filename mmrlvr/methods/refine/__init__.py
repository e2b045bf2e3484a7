"""ThinkTwice / refine (`rollout.episode: refine`): the policy answers, then in alternate phases
refines one shared first answer G times, with the instruction `rollout.episode_args.instruction`.

The whole method is its episode: the turn function and phase schedule registered as the episode
`refine` in `mmrlvr.rollout.refine` (the episode registry loads it there, next to the other
built-in episodes). It fills no recipe hook; its record makes it a method the recipe can list
and the docs can find. Docs: explanation/episode-methods.md.
"""

from __future__ import annotations

from mmrlvr.methods.hooks import Method, episode_is, register

METHOD = register(Method("refine", "explanation/episode-methods.md", on=episode_is("refine"), experimental=True))
