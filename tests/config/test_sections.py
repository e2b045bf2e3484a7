"""A method's config section is declared in its folder (`mmrlvr/methods/<name>/settings.py`) and
registered into `mmrlvr.config.sections.SECTIONS`; the schema reads its class from there when it
builds, defaults, suggests and prints a config, without importing the method or torch."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmrlvr.config import ConfigError, load_config, save_config, to_dict
from mmrlvr.config.keys import schema_keys
from mmrlvr.config.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[2]

FRESH = """
import json, sys
from mmrlvr.config import load_config
cfg = load_config(None, ["sample_efficiency.arrol.head_steps=3"])
owners = {key: type(eval("cfg." + key)).__module__ for key in (
    "temporal_contrast", "token_weighting", "sample_efficiency.replay", "sample_efficiency.dbb",
    "sample_efficiency.demos", "sample_efficiency.arrol")}
print(json.dumps({"owners": owners, "head_steps": cfg.sample_efficiency.arrol.head_steps,
                  "loaded": sorted(m for m in ("torch", "mmrlvr.methods.builtin", "mmrlvr.algos") if m in sys.modules)}))
"""


def test_a_fresh_process_builds_each_method_section_from_its_folder_without_torch_or_the_methods():
    out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["owners"] == {
        "temporal_contrast": "mmrlvr.methods.temporal_contrast.settings",
        "token_weighting": "mmrlvr.methods.token_weighting.settings",
        "sample_efficiency.replay": "mmrlvr.methods.replay.settings",
        "sample_efficiency.dbb": "mmrlvr.methods.dbb.settings",
        "sample_efficiency.demos": "mmrlvr.methods.demos.settings",
        "sample_efficiency.arrol": "mmrlvr.methods.arrol.settings",
    }
    assert seen["head_steps"] == 3 and seen["loaded"] == []


@dataclasses.dataclass
class Throwaway:
    enabled: bool = False
    """A throwaway method's switch."""
    rounds: int = 3
    """How many rounds."""
    share: float = 0.25
    """A share."""


def test_a_section_registered_in_a_test_becomes_config_keys_with_coercion_and_suggestions(monkeypatch, tmp_path):
    """The section the table holds is the one the config builds: its keys, their types, "did you mean"."""
    with monkeypatch.context() as patch:
        patch.setattr(SECTIONS, "_items", SECTIONS.snapshot())
        patch.setitem(SECTIONS._items, "sample_efficiency.demos", Throwaway)
        cfg = load_config(None, ["sample_efficiency.demos.share=1", "sample_efficiency.demos.rounds=5"])
        assert type(cfg.sample_efficiency.demos) is Throwaway
        assert cfg.sample_efficiency.demos.share == 1.0 and isinstance(cfg.sample_efficiency.demos.share, float)
        assert cfg.sample_efficiency.demos.rounds == 5 and load_config().sample_efficiency.demos == Throwaway()
        assert "sample_efficiency.demos.rounds" in schema_keys(type(cfg))
        with pytest.raises(ConfigError, match=r"did you mean sample_efficiency.demos.rounds\?"):
            load_config(None, ["sample_efficiency.demos.round=2"])
        with pytest.raises(ConfigError, match=r"sample_efficiency.demos.rounds: expected int, got 'many'"):
            load_config(None, ["sample_efficiency.demos.rounds=many"])
        save_config(cfg, tmp_path / "c.yaml")
        assert to_dict(load_config(tmp_path / "c.yaml")) == to_dict(cfg)
    # the real section again, and no suggestion left over from the throwaway
    assert type(load_config().sample_efficiency.demos).__name__ == "DemosConfig"
    assert "sample_efficiency.demos.rounds" not in schema_keys(type(load_config()))
    with pytest.raises(ConfigError, match=r"did you mean sample_efficiency.demos.k\?"):
        load_config(None, ["sample_efficiency.demos.kk=2"])
