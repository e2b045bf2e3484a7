"""prco's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.hooks import Method, episode_is, register
from mmrlvr.methods.prco import episode  # noqa: F401 - registers the episode `prco`
from mmrlvr.methods.prco.solve import solve_captions

METHOD = register(Method("prco", "explanation/episode-methods.md",
                         on=episode_is("prco"), collect=solve_captions, experimental=True))
