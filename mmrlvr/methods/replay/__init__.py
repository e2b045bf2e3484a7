"""Prompt replay (`sample_efficiency.replay`): prompts whose pass rate sits in a band come back.

Fills `source`: the seeded stream is replaced by `PromptReplay` (prompts.py), which draws the same
fresh order and mixes replayed prompts in; its queue lives in the source's state dict, so a
checkpoint resumes it. Docs: explanation/sample-efficiency.md.
Its config section's dataclass is `settings.py` (light: the config reads it without the method).
"""
