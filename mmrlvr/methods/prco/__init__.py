"""PRCO (`rollout.episode: prco`): the policy plays an Observer that captions the image and a
Solver that answers from the caption alone; the caption is rewarded by the Solver's success.

The whole method is this folder: the episode (the Observer's turn, the Solver's prompt, registered
as the episode `prco`) in episode.py, the reward maths (leak gates, the Observer's utility) in
maths.py, and the `collect` hook in solve.py (K Solver answers per caption, both roles' rewards,
one extra group per caption). Importing `method.py` (the record) registers the episode
with the method.
Docs: explanation/episode-methods.md.
"""
