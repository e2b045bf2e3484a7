"""HiLL (`rollout.episode: hill`): hints for groups with no correct answer, hinted re-rollouts, and
the hints' own rewards, as the authors' trainer runs one step.

The whole method is this folder: the episode pieces (its settings, the hinter's prompt, the hinted
prompt, registered as the episode `hill`) in episode.py, the hint reward, gates and choice in
maths.py, and the `collect` hook in hints.py. Importing the folder registers the episode with the
method. Docs: explanation/episode-methods.md.
"""

from __future__ import annotations

from mmrlvr.methods.hill import episode  # noqa: F401 - registers the episode `hill`
from mmrlvr.methods.hill.hints import hill_hints
from mmrlvr.methods.hooks import Method, episode_is, register

METHOD = register(Method("hill", "explanation/episode-methods.md",
                         on=episode_is("hill"), collect=hill_hints, experimental=True))
