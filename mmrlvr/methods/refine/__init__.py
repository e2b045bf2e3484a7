"""ThinkTwice / refine (`rollout.episode: refine`): the policy answers, then in alternate phases
refines one shared first answer G times, with the instruction `rollout.episode_args.instruction`.

The whole method is its episode: the turn function and phase schedule in episode.py, registered as
the episode `refine` when its record (`method.py`) is imported (the episode registry imports
`mmrlvr.methods.builtin` on its first read). It fills no recipe hook; its record makes it a method
the recipe can list and the docs can find. Docs: explanation/episode-methods.md.
"""
