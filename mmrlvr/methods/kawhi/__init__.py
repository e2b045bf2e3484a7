"""KAWHI (`token_weighting.method: kawhi`): reasoning steps weighted by how well their attention
lands on the regions the answer needs (every formula our reading; docs/explanation/kawhi.md).

The folder holds the whole method's maths, pure tensor functions: `regions.py` (the vision heads,
the salient region and each token's attention on it) and `steps.py` (the response split into
reasoning steps and the step weights); `weighting.py` registers the weighting `kawhi` into
`mmrlvr.algos.token_weights.METHODS`. The signals it needs (entropy, region attention, step ids)
come from the token-weighting folder's forwards. It fills no recipe hook of its own: the token
weighting method carries it into the update.
Its settings are the `kawhi_*` keys of the token-weighting section
(`mmrlvr/methods/token_weighting/settings.py`).
"""
