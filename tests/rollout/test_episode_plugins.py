"""The built-in episodes live in their method folders (`mmrlvr/methods/<name>/episode.py`), above the
rollout layer; the episode registry imports `mmrlvr.methods` on its first read. So a process that
only validates a config (as `mmrlvr validate` does) and never imports a method still knows them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import ROOT

FRESH = """
import json, sys
from mmrlvr.checks.validate import config_errors
from mmrlvr.config import load_config
before = "mmrlvr.methods" in sys.modules
runs = {"prco": [], "hill": [], "refine": [], "tools": [], "nope": [], "prco_bogus": ["rollout.episode_args.bogus=1"]}
errors = {k: config_errors(load_config(None, [f"rollout.episode={k.split('_')[0]}", *extra])) for k, extra in runs.items()}
print(json.dumps({"before": before, "errors": errors}))
"""


def test_validation_in_a_fresh_process_knows_every_built_in_episode():
    done = subprocess.run([sys.executable, "-c", FRESH], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"] is False  # nothing imported a method folder before validation read the registry
    errors = out["errors"]
    assert errors["prco"] == errors["hill"] == errors["refine"] == errors["tools"] == []
    assert errors["nope"] == ["rollout.episode='nope': expected a registered episode: hill, prco, refine, single, tools"]
    # the episode's own settings (its registration's `args`) reach validation too
    assert errors["prco_bogus"] == ["rollout.episode_args.bogus=1: expected text or a number for one of the prco "
                                    "episode's settings: solver_answers, solver_image_after, leak_gate, leak_reward, "
                                    "observer_template, solver_template"]
