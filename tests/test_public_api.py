"""`import mmrlvr` is light, and what it offers is visible where a new user looks: `dir(mmrlvr)`."""

import subprocess
import sys


def test_dir_lists_the_public_api_without_importing_torch():
    code = ("import sys, mmrlvr; names = dir(mmrlvr); "
            "print('run' in names, '__version__' in names, 'torch' in sys.modules, callable(mmrlvr.run))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "True"]
