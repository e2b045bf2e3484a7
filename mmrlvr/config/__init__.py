"""The run's configuration, the ground floor every layer reads: its schema, loading and overrides,
limits. `from mmrlvr.config import Config, load_config, ConfigError` is the public face.

Modules (each one job):

- `schema`: the nested dataclasses (`Config` and its sections) and their loading from YAML with
  dotted overrides (`load_config`, `build_config`, `save_config`, `to_dict`).
- `keys`: parsing overrides, "did you mean", blaming the override that set a bad key or value.
- `limits`: `ConfigError` and the size limits on a config file (`MAX_CONFIG_VALUES`).
- `sections`: the table of the sections a method declares in its own folder (`SECTIONS`: token
  weighting, temporal contrast, each sample-efficiency method), read by key when a config is built,
  defaulted, suggested or printed; `mmrlvr.methods.sections` fills it with the folders' light
  `settings.py` files, so loading a config imports no method and no torch.
- `efficiency`, `rollout`: section records kept out of `schema` for length (the sample-efficiency
  container and the readers its methods share, rollout). `TokenWeightingConfig` and
  `TemporalContrastConfig` are still importable from here: read from `SECTIONS`.
- `arg_types`: the types of a task's declared arguments.

The checks that read tasks, verifiers, algos and episodes (`validate_config`, its rules, the
warnings, the rendered reference) sit in a room above them, `mmrlvr.checks`: nothing here imports
a higher layer.
"""

from mmrlvr.config.keys import apply_overrides
from mmrlvr.config.limits import MAX_CONFIG_VALUES, ConfigError, check_expanded_size, short
from mmrlvr.config.schema import (
    LR_SCHEDULES,
    AlgoConfig,
    Config,
    EvalConfig,
    ModelConfig,
    RewardTerm,
    RolloutConfig,
    SampleEfficiencyConfig,
    TaskConfig,
    TrainConfig,
    WarmStartConfig,
    build_config,
    load_config,
    portable_model_path,
    save_config,
    to_dict,
)

__all__ = [
    "LR_SCHEDULES", "MAX_CONFIG_VALUES", "AlgoConfig", "Config", "ConfigError", "EvalConfig", "ModelConfig",
    "RewardTerm", "RolloutConfig", "SampleEfficiencyConfig", "TaskConfig", "TemporalContrastConfig",
    "TokenWeightingConfig", "TrainConfig", "WarmStartConfig", "apply_overrides", "build_config",
    "check_expanded_size", "load_config", "portable_model_path", "save_config", "short", "to_dict",
]

_SECTION_CLASSES = {"TemporalContrastConfig": "temporal_contrast", "TokenWeightingConfig": "token_weighting"}


def __getattr__(name: str):
    """A method's section class, declared in its folder, read from the table it registered into
    (`from mmrlvr.config import TokenWeightingConfig` keeps working; nothing is imported upward)."""
    if name in _SECTION_CLASSES:
        from mmrlvr.config.sections import SECTIONS

        return SECTIONS.get(_SECTION_CLASSES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
