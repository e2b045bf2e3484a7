"""kawhi's record of hooks (the folder's docstring says what it fills). Importing this module
registers it, with everything it imports; `mmrlvr.methods.builtin` does, in the hooks' order. The
folder's own `__init__` stays import-light: a module of the folder is imported without it."""

from __future__ import annotations

from mmrlvr.methods.kawhi import checks
from mmrlvr.methods.hooks import Method, register
from mmrlvr.methods.kawhi import weighting  # noqa: F401 - registers the token weighting kawhi

METHOD = register(Method("kawhi", "explanation/kawhi.md", rules=checks.RULES,
                         on=lambda cfg: cfg.token_weighting.method == "kawhi",
                         experimental=True))
