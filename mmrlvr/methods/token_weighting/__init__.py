"""Token weighting (`token_weighting.method`, `token_weighting.diagnostics`): per-token advantage
weights that separate perception from reasoning tokens, and the diagnostics that label them.

The weightings (none, entropy_topk, vppo, pepo, tor, kawhi) are a registry of pure functions,
`mmrlvr.algos.token_weights.METHODS` (kawhi's registered from its own folder); this folder holds the signals' forwards (signals.py) and the
weigher the learner calls before each update (weigher.py). Fills `launch` (refused with sharded
parameters, diagnostics off there), `weights` (the `TokenWeigher`) and `record` (rank 0's
`token_roles/step_N.jsonl` on logged steps). On whenever a weighting or the diagnostics are.
Docs: explanation/token-weighting.md.
Its config section's dataclass is `settings.py` (light: the config reads it without the method),
kawhi's `kawhi_*` keys included.
"""
