"""Methods as plug-ins: each folder here is one method and registers one `Method` record of hooks.

Importing this package registers every built-in method, in the order below, which is the
order the recipe calls their hooks (a source is replaced before it is wrapped; a reward bonus is
added before an episode's own collect step reads the rewards). Adding a method is one new folder
(its `__init__.py` registers its record) imported here, plus its tests and docs page.
"""

from mmrlvr.methods import (  # noqa: F401 - each import registers the method
    replay, demos, dbb, temporal_contrast, prco, hill, refine, tools, arrol, token_weighting, kawhi,
)
from mmrlvr.methods.hooks import HOOKS, METHODS, Live, Method, active, register  # noqa: F401
