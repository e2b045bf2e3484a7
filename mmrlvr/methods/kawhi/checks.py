"""KAWHI's checks of its `token_weighting.kawhi_*` keys, one line each, before anything heavy runs."""

from __future__ import annotations

from mmrlvr.checks.rules import Rule, _num, one_of

RULES: tuple[Rule, ...] = (
    Rule("token_weighting.kawhi_split", one_of("paragraph", "line", "sentence"), "paragraph, line or sentence"),
    Rule("token_weighting.kawhi_layers", lambda v: bool(v) and all(type(i) is int for i in v),
         "a non-empty list of layer indices (negative counts from the end)"),
    Rule("token_weighting.kawhi_heads", lambda v: type(v) is int and v >= 1, "an integer >= 1"),
    Rule("token_weighting.kawhi_region_frac", lambda v: _num(v) and 0 < v <= 1, "a number in (0, 1]"),
    *[Rule(f"token_weighting.kawhi_{k}", lambda v: _num(v) and 0 <= v <= 1, "a number in [0, 1]")
      for k in ("align_weight", "strength")],
)
