"""Every built-in method's config section, registered by importing its folder's `settings.py`:
the plug-in module of `mmrlvr.config.sections.SECTIONS`, read when a config is first built.

Only the light settings files are imported (dataclasses, no torch, no method record): loading a
config must stay as cheap as before (`tests/test_public_api.py`, `tests/config/test_sections.py`).
"""

from mmrlvr.methods.temporal_contrast import settings as _temporal_contrast  # noqa: F401 - each import registers its section
from mmrlvr.methods.token_weighting import settings as _token_weighting  # noqa: F401
from mmrlvr.methods.replay import settings as _replay  # noqa: F401
from mmrlvr.methods.dbb import settings as _dbb  # noqa: F401
from mmrlvr.methods.demos import settings as _demos  # noqa: F401
from mmrlvr.methods.arrol import settings as _arrol  # noqa: F401
