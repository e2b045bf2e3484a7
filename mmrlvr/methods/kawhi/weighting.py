"""The token weighting `kawhi`, registered into the algos' table from here (the method's folder).

`mmrlvr.algos.token_weights.METHODS` names `mmrlvr.methods` as its plug-in package, so this module
is imported before the table is first read: `token_weighting.method: kawhi` is found by validation
and by the weigher alike, while the algos layer never imports a method.
"""

from __future__ import annotations

import torch

from mmrlvr.algos.token_weights import register_method
from mmrlvr.methods.kawhi.steps import step_weights


@register_method("kawhi", needs=("entropy", "region_attention", "step_ids"))
def kawhi(signals, mask, kawhi_align_weight: float = 0.5, kawhi_strength: float = 1.0) -> torch.Tensor:
    """KAWHI (every formula our reading): `steps.step_weights` with alignment = the region attention
    (`regions.region_attention`) and decisiveness = the entropy (a decisive step is one where the
    policy chose among alternatives: its mean token entropy, the forks of the 80/20 rule)."""
    if not (0.0 <= kawhi_align_weight <= 1.0 and 0.0 <= kawhi_strength <= 1.0):
        raise ValueError("kawhi_align_weight and kawhi_strength must lie in [0, 1]")
    return step_weights(signals["region_attention"], signals["entropy"], signals["step_ids"], mask,
                        kawhi_align_weight, kawhi_strength)
