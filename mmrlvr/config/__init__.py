"""The run's configuration, the ground floor every layer reads: its schema, loading and overrides,
limits. `from mmrlvr.config import Config, load_config, ConfigError` is the public face.

Modules (each one job):

- `schema`: the nested dataclasses (`Config` and its sections) and their loading from YAML with
  dotted overrides (`load_config`, `build_config`, `save_config`, `to_dict`).
- `keys`: parsing overrides, "did you mean", blaming the override that set a bad key or value.
- `limits`: `ConfigError` and the size limits on a config file (`MAX_CONFIG_VALUES`).
- `methods`, `efficiency`, `rollout`: the section records kept out of `schema` for length
  (token weighting / temporal contrast, sample efficiency, rollout).
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
    TemporalContrastConfig,
    TokenWeightingConfig,
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
