"""tools's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.hooks import Method, episode_is, register
from mmrlvr.methods.tools import episode  # noqa: F401 - registers the episode `tools`

METHOD = register(Method("tools", "explanation/episodes.md", on=episode_is("tools")))
