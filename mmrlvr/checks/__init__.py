"""Checks of a whole config before anything heavy runs, and the reference rendered from the schema.

`validate` (`validate_config`, `config_errors`) and its rule modules read tasks, verifiers, algos,
episodes and engines, so they sit above them; the schema they check (`mmrlvr.config`) is the
ground floor. `reference` renders `mmrlvr config --show`, task arguments included.
"""
