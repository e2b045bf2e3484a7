"""HiLL (`rollout.episode: hill`): hints for groups with no correct answer, hinted re-rollouts, and
the hints' own rewards, as the authors' trainer runs one step.

The whole method is this folder: the episode pieces (its settings, the hinter's prompt, the hinted
prompt, registered as the episode `hill`) in episode.py, the hint reward, gates and choice in
maths.py, and the `collect` hook in hints.py. Importing `method.py` (the record) registers the
episode with the method. Docs: explanation/episode-methods.md.
"""
