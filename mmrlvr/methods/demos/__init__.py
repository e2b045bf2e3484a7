"""Demonstration bootstrapping (`sample_efficiency.demos`, CBRL): solved examples shown as earlier
chat turns, with a probability that falls to 0 over training.

Fills `source`: the prompt source is wrapped by `DemoSource` (source.py), which adds the
demonstrations right after `take` (never for evaluation, which reads the eval split). Docs:
explanation/sample-efficiency.md.
Its config section's dataclass is `settings.py` (light: the config reads it without the method).
"""
