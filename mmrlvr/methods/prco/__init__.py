"""PRCO (`rollout.episode: prco`): the policy plays an Observer that captions the image and a
Solver that answers from the caption alone; the caption is rewarded by the Solver's success.

The episode (the Observer's turn, the Solver's prompt) is `mmrlvr.rollout.prco`, the reward
maths `mmrlvr.algos.prco`; this folder fills `collect` (solve.py: K Solver answers per caption,
both roles' rewards, one extra group per caption). Docs: explanation/episode-methods.md.
"""

from __future__ import annotations

from mmrlvr.methods.hooks import Method, episode_is, register
from mmrlvr.methods.prco.solve import solve_captions

METHOD = register(Method("prco", "explanation/episode-methods.md",
                         on=episode_is("prco"), collect=solve_captions, experimental=True))
