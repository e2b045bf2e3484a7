"""Temporal contrast (`temporal_contrast.enabled`, T-GRPO): video prompts answered again on their
frames shuffled; a group right more often on ordered frames gets a reward bonus.

Fills `collect`: after a round is scored, the shuffled re-answers (scored, never trained on,
bonus.py) decide the bonus added to the round's rewards; the maths (T-GRPO's and TGPO's bonus,
pure functions of the scores) is maths.py. Docs: explanation/temporal-contrast.md.
Its config section's dataclass is `settings.py` (light: the config reads it without the method).
"""
