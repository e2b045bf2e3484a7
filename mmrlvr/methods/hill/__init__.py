"""HiLL (`rollout.episode: hill`): hints for groups with no correct answer, hinted re-rollouts, and
the hints' own rewards, as the authors' trainer runs one step.

The episode pieces (the hinter's prompt, the hinted prompt) are `mmrlvr.rollout.hill`, the hint
reward `mmrlvr.algos.hints`; this folder fills `collect` (hints.py). Docs:
explanation/episode-methods.md.
"""

from __future__ import annotations

from mmrlvr.methods.hill.hints import hill_hints
from mmrlvr.methods.hooks import Method, episode_is, register

METHOD = register(Method("hill", "explanation/episode-methods.md",
                         on=episode_is("hill"), collect=hill_hints, experimental=True))
