"""Every built-in method's record, registered by importing it: the plug-in package of `METHODS`
and of the tables the folders fill below (`algos`, `rollout`, `checks`), loaded on their first read.

The order is the order the recipe calls their hooks (a source is replaced before it is wrapped; a
reward bonus is added before an episode's own collect step reads the rewards), and the order the
episodes, estimators and weightings are listed in.
"""

from mmrlvr.methods.replay import method as _replay  # noqa: F401 - each import registers the method
from mmrlvr.methods.demos import method as _demos  # noqa: F401
from mmrlvr.methods.dbb import method as _dbb  # noqa: F401
from mmrlvr.methods.temporal_contrast import method as _temporal_contrast  # noqa: F401
from mmrlvr.methods.refine import method as _refine  # noqa: F401
from mmrlvr.methods.hill import method as _hill  # noqa: F401
from mmrlvr.methods.prco import method as _prco  # noqa: F401
from mmrlvr.methods.tools import method as _tools  # noqa: F401
from mmrlvr.methods.arrol import method as _arrol  # noqa: F401
from mmrlvr.methods.token_weighting import method as _token_weighting  # noqa: F401
from mmrlvr.methods.kawhi import method as _kawhi  # noqa: F401
