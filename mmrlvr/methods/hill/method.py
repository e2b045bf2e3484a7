"""hill's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.hill import episode  # noqa: F401 - registers the episode `hill`
from mmrlvr.methods.hill.hints import hill_hints
from mmrlvr.methods.hooks import Method, episode_is, register

METHOD = register(Method("hill", "explanation/episode-methods.md",
                         on=episode_is("hill"), collect=hill_hints, experimental=True))
