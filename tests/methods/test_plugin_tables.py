"""A method's estimator or weighting is registered from its folder into a table of `algos`; the
table names `mmrlvr.methods` as its plug-in package, so a reader that never imported the methods
(validation in a fresh process, the first thing `mmrlvr validate` does; a script reading one
table) still finds them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

VALIDATION = """
from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors

before = "mmrlvr.methods" in sys.modules
named = config_errors(load_config(None, ["algo.advantage=dbb", "token_weighting.method=kawhi"]))
unknown = config_errors(load_config(None, ["algo.advantage=nope", "token_weighting.method=nope"]))
keys = ("algo.advantage", "token_weighting.method")
got = [l for l in named if l.startswith(keys)] + [l for l in unknown if l.startswith(keys)]
"""
# each table alone: validation reads the estimators first, whose load would register kawhi too
ESTIMATORS = """
from mmrlvr.algos.advantages import ADVANTAGES

before = "mmrlvr.methods" in sys.modules
got = ADVANTAGES.names()
"""
WEIGHTINGS = """
from mmrlvr.algos.token_weights import METHODS

before = "mmrlvr.methods" in sys.modules
got = METHODS.names()
"""
READERS = {
    "validation": (VALIDATION, ["algo.advantage='nope': one of dbb, dr_grpo, grpo, reinforce_pp, rloo",
                                "token_weighting.method='nope': one of entropy_topk, kawhi, none, pepo, tor, vppo"]),
    "estimators": (ESTIMATORS, ["dbb", "dr_grpo", "grpo", "reinforce_pp", "rloo"]),
    "weightings": (WEIGHTINGS, ["entropy_topk", "kawhi", "none", "pepo", "tor", "vppo"]),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fresh_reader_finds_dbb_and_kawhi_registered_from_their_folders(reader):
    code, want = READERS[reader]
    script = "import json, sys\n" + code + "print(json.dumps({'before': before, 'got': got}))\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] is False  # nothing had imported the method folders when the table was read
    assert seen["got"] == want
