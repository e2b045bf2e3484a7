"""The run's configuration in one package: its schema, loading and overrides, limits, validation, and
the rendered reference. `from mmrlvr.config import Config, load_config, ConfigError` is the public face.

Modules (each one job; layers as in tests/test_layers.py):

- `schema`: the nested dataclasses (`Config` and its sections) and their loading from YAML with
  dotted overrides (`load_config`, `build_config`, `save_config`, `to_dict`).
- `keys`: parsing overrides, "did you mean", blaming the override that set a bad key or value.
- `limits`: `ConfigError` and the size limits on a config file (`MAX_CONFIG_VALUES`).
- `methods`, `efficiency`, `rollout`: the section records kept out of `schema` for length
  (token weighting / temporal contrast, sample efficiency, rollout).
- `validate`: `validate_config` and `config_errors`, a whole config checked (tasks, verifiers,
  algos, presets) before anything heavy loads; its rules are `rules` (the rule record and checks),
  `bounds` (numeric bounds and sizes), `task_checks` (the task section and its arguments),
  `rollout_checks` (the engine, the rollout server, episodes), `arrol_checks`
  (sample_efficiency.arrol) and `notes` (warnings that do not stop a run).
- `docs`: renders `mmrlvr config --show` (the annotated reference, task arguments included).

This face imports only the schema layer: `validate`, `notes` and `docs` read tasks, verifiers and
algos, which themselves read the schema, so they are imported by their module path
(`from mmrlvr.config.validate import validate_config`), never from here (no import circle).
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
