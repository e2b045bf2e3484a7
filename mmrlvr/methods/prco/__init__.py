"""PRCO (`rollout.episode: prco`): the policy plays an Observer that captions the image and a
Solver that answers from the caption alone; the caption is rewarded by the Solver's success.

The whole method is this folder: the episode (the Observer's turn, the Solver's prompt, registered
as the episode `prco`) in episode.py, the reward maths (leak gates, the Observer's utility) in
maths.py, and the `collect` hook in solve.py (K Solver answers per caption, both roles' rewards,
one extra group per caption). Importing the folder registers the episode with the method.
Docs: explanation/episode-methods.md.
"""

from __future__ import annotations

from mmrlvr.methods.hooks import Method, episode_is, register
from mmrlvr.methods.prco import episode  # noqa: F401 - registers the episode `prco`
from mmrlvr.methods.prco.solve import solve_captions

METHOD = register(Method("prco", "explanation/episode-methods.md",
                         on=episode_is("prco"), collect=solve_captions, experimental=True))
