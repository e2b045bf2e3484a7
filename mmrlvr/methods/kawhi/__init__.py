"""KAWHI (`token_weighting.method: kawhi`): reasoning steps weighted by how well their attention
lands on the regions the answer needs (every formula our reading; docs/explanation/kawhi.md).

The step weights are pure maths (`mmrlvr.algos.kawhi`), registered as the weighting `kawhi` in
`mmrlvr.algos.token_weights`; the signals it needs (entropy, region attention, step ids) come
from the token-weighting folder's forwards. It fills no recipe hook of its own: the token
weighting method carries it into the update.
"""

from __future__ import annotations

from mmrlvr.methods.kawhi import checks
from mmrlvr.methods.hooks import Method, register

METHOD = register(Method("kawhi", "explanation/kawhi.md", rules=checks.RULES,
                         on=lambda cfg: cfg.token_weighting.method == "kawhi",
                         experimental=True))
