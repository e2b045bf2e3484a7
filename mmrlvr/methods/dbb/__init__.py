"""DBB, the Bayesian baseline (`sample_efficiency.dbb` or `algo.advantage: dbb`): each prompt's
pass rate as a Beta posterior carried across steps, the advantage's baseline read from it.

The folder holds the whole method: its maths (`posteriors.py`: the Beta-Bernoulli baseline and
the per-prompt posteriors, pure tensors), the estimator `dbb` it registers into the algos' table
(`estimator.py`), its settings' checks, warning and resolution (`checks.py`), and its record
(`method.py`), which fills `check`, `warn`, `resolve`, `estimator` (its settings record from the
config) and `sync` (each rank updated its own prompts' posteriors: share them, so every rank reads the
same). Docs: explanation/sample-efficiency.md.
Its config section's dataclass is `settings.py` (light: the config reads it without the method).
"""
