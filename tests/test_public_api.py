"""`import mmrlvr` is light, and what it offers is visible where a new user looks: `dir(mmrlvr)`."""

import subprocess
import sys


def test_dir_lists_the_public_api_without_importing_torch():
    code = ("import sys, mmrlvr; names = dir(mmrlvr); "
            "print('run' in names, '__version__' in names, 'torch' in sys.modules, callable(mmrlvr.run))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "True"]


def test_the_config_face_is_the_schema_layer_alone():
    """`from mmrlvr.config import Config, load_config, ConfigError` works first in a fresh interpreter
    and loads neither validation (which reads tasks, verifiers and algos) nor torch: a module of any
    layer may read the config without pulling the layers above it in."""
    code = ("import sys; from mmrlvr.config import Config, ConfigError, load_config; "
            "print(load_config(None, ['rollout.group_size=3']).rollout.group_size, issubclass(ConfigError, ValueError), "
            "sorted(m for m in sys.modules if m.startswith(('mmrlvr.checks.validate', 'mmrlvr.tasks', "
            "'mmrlvr.algos', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3", "True", "[]"]
