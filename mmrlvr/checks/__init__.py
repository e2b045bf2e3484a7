"""Checks of a whole config before anything heavy runs, its resolution, and the rendered reference.

`validate` (`validate_config`, `config_errors`) and its rule modules read tasks, verifiers, algos,
episodes and engines, so they sit above them; the schema they check (`mmrlvr.config`) is the
ground floor. `resolve` fills the algorithm's preset into a config (once per run); `reference`
renders `mmrlvr config --show`, task arguments included.
"""
