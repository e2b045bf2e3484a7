"""Token weighting's checks of `token_weighting.*` (KAWHI's own keys are its folder's), one line each,
before anything heavy runs."""

from __future__ import annotations

from typing import Iterable

from mmrlvr.checks.rules import Rule, _line, _num, above, at_least, one_of

RULES: tuple[Rule, ...] = (
    *[Rule(f"token_weighting.{k}", lambda v: _num(v) and 0 < v <= 1, "a number in (0, 1]")
      for k in ("top_frac", "perception_frac", "reasoning_frac", "vppo_top_frac")],
    Rule("token_weighting.corrupt_prob", lambda v: _num(v) and 0 <= v <= 1, "a probability in [0, 1]"),
    Rule("token_weighting.vppo_beta_min", lambda v: _num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    Rule("token_weighting.pepo_variant", one_of("released", "minmax"), "released or minmax"),
    Rule("token_weighting.pepo_gate", at_least(0), "a finite number >= 0"),
    Rule("token_weighting.pepo_temperature", above(0), "a finite number > 0"),
    *[Rule(f"token_weighting.tor_{k}", at_least(0), "a finite number >= 0")
      for k in ("perception", "reasoning", "both", "other")],
    Rule("token_weighting.similarity_layers", lambda v: bool(v) and all(isinstance(i, int) for i in v),
         "a non-empty list of layer indices (negative counts from the end)"),
    Rule("token_weighting.roles_per_step", at_least(0), "an integer >= 0"),
)


def check(cfg) -> Iterable[str]:
    """The method is a registered weighting whose settings the config can fill, and tor has a weight."""
    from mmrlvr.algos.token_weights import METHODS

    tw = cfg.token_weighting
    if tw.method not in METHODS:
        yield _line("token_weighting.method", tw.method, f"one of {', '.join(METHODS.names())}")
    else:  # a method whose settings the config cannot fill would fail at the first step, after the model loads
        try:
            METHODS.get(tw.method).settings(tw)
        except AttributeError as exc:
            yield _line("token_weighting.method", tw.method, f"a method whose settings are all token_weighting keys ({exc})")
    coefs = [tw.tor_perception, tw.tor_reasoning, tw.tor_both, tw.tor_other]
    if tw.method == "tor" and all(_num(c) for c in coefs) and max(coefs) <= 0:
        yield _line("token_weighting.tor_*", coefs, "at least one coefficient > 0")
