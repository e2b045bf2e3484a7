"""The method folders' own settings checks reach the validation through its table
(`mmrlvr.checks.rules.METHOD_SETTINGS`): the validation names no method, and still runs them all,
in a process that never imported the methods' records (`mmrlvr.methods.builtin`) itself."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from mmrlvr.checks.rules import METHOD_SETTINGS, Rule
from mmrlvr.checks.notes import config_warnings
from mmrlvr.checks.resolve import resolve_config
from mmrlvr.checks.validate import config_errors
from mmrlvr.config import load_config
from mmrlvr.methods import METHODS, Method, register

ROOT = Path(__file__).resolve().parents[2]

BAD = ["token_weighting.kawhi_heads=0", "sample_efficiency.arrol.head_steps=0", "temporal_contrast.alpha=-1",
       "sample_efficiency.replay.enabled=true", "sample_efficiency.replay.min_pass_rate=0.9",
       "sample_efficiency.dbb.scale=huge", "sample_efficiency.demos.k=0", "token_weighting.method=tor",
       "token_weighting.tor_perception=0", "token_weighting.tor_reasoning=0", "token_weighting.tor_both=0",
       "token_weighting.tor_other=0"]
EXPECTED = [  # in the methods' registration order: replay, demos, dbb, temporal contrast, arrol, token weighting, kawhi
    "sample_efficiency.replay.min_pass_rate=0.9: expected <= sample_efficiency.replay.max_pass_rate (0.7)",
    "sample_efficiency.demos.k=0: expected an integer >= 1",
    "sample_efficiency.dbb.scale='huge': expected std or none",
    "temporal_contrast.alpha=-1.0: expected a finite number >= 0",
    "sample_efficiency.arrol.head_steps=0: expected an integer >= 1",
    "token_weighting.tor_*=[0.0, 0.0, 0.0, 0.0]: at least one coefficient > 0",
    "token_weighting.kawhi_heads=0: expected an integer >= 1",
]


def test_each_method_folder_checks_its_own_settings_in_registration_order(tmp_path):
    assert config_errors(load_config(None, [*BAD, f"output_dir={tmp_path}"])) == EXPECTED


def test_a_fresh_process_that_never_imported_the_methods_still_runs_their_checks(tmp_path):
    """`mmrlvr validate` reaches the checks before anything imports `mmrlvr.methods.builtin`: reading
    the table imports the plug-in package by name (mmrlvr.registry)."""
    code = ("import sys; from mmrlvr.checks.validate import config_errors; from mmrlvr.config import load_config; "
            "assert 'mmrlvr.methods.builtin' not in sys.modules; "
            f"print('\\n'.join(config_errors(load_config(None, {BAD + [f'output_dir={tmp_path}']!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={"PATH": "", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == EXPECTED


def test_a_new_method_adds_its_checks_with_its_record_and_nothing_else(monkeypatch, tmp_path):
    """A throwaway method's rule, check, warning and resolution are run the moment its record is registered."""
    monkeypatch.setattr(METHODS, "_items", METHODS.snapshot())
    monkeypatch.setattr(METHOD_SETTINGS, "_items", METHOD_SETTINGS.snapshot())
    cfg = load_config(None, ["rollout.top_k=7", f"output_dir={tmp_path}"])
    assert config_errors(cfg) == []
    register(Method("odd_top_k", "explanation/methods.md", on=lambda c: False,
                    rules=(Rule("rollout.top_k", lambda v: v % 2 == 0, "an even number with odd_top_k"),),
                    check=lambda c: iter([f"seen {c.rollout.top_k}"]), warn=lambda c: f"warned {c.rollout.top_k}",
                    resolve=lambda c: dataclasses.replace(c, seed=c.seed + c.rollout.top_k)))
    assert config_errors(cfg) == ["rollout.top_k=7: expected an even number with odd_top_k", "seen 7"]
    assert list(config_warnings(cfg)) == ["warned 7"]
    assert resolve_config(cfg).seed == cfg.seed + 7 and resolve_config(cfg).algo.advantage == "grpo"
    with pytest.raises(ValueError, match="method settings 'odd_top_k' is already registered"):
        METHOD_SETTINGS.register("odd_top_k")(None)
