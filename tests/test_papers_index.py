"""The paper index (docs/papers.md) names configs that exist and settings that validate.

Every `mmrlvr train CONFIG overrides` command on the page is read back and put through the checks
`mmrlvr train` runs before anything loads, so a renamed key or a removed config breaks this test
rather than a reader's run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mmrlvr.config import load_config
from mmrlvr.checks.validate import validate_config

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "papers.md"
COMMAND = re.compile(r"`(mmrlvr train [^`]+)`")


def _commands() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "mmrlvr train" in line]
    return [cmd for line in rows for cmd in COMMAND.findall(line)]


def test_the_index_names_a_command_for_each_paper_row():
    rows = [line for line in PAGE.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and ("arxiv.org" in line or "blog post" in line)]
    assert len(rows) == 23, f"23 paper rows, each linking its paper; found {len(rows)}"
    assert all("mmrlvr train" in row or "any config" in row for row in rows), [r[:60] for r in rows if "mmrlvr train" not in r]


@pytest.mark.parametrize("command", _commands())
def test_each_paper_setting_validates(command, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)
    assert argv[:2] == ["mmrlvr", "train"]
    config, overrides = argv[2], argv[3:]
    assert (ROOT / config).is_file(), f"{config} named in docs/papers.md does not exist"
    from mmrlvr.checks.validate import config_errors

    # every check but vLLM's presence: the main environment has none (its own job runs vLLM)
    errors = [e for e in config_errors(load_config(config, overrides))
              if not e.startswith("rollout.engine='vllm': expected an installed vLLM")]
    assert errors == []


def test_the_vppo_command_carries_the_released_scripts_loss_settings(monkeypatch):
    """VPPO's 7B script (examples/configs/train_vppo_7b.sh, config.yaml at a23c54b) trains with
    clip-higher 0.28 and an entropy penalty of 0.06: a VPPO row without them is another method."""
    monkeypatch.chdir(ROOT)
    vppo = [c for c in _commands() if "token_weighting.method=vppo" in c]
    assert len(vppo) == 1
    argv = shlex.split(vppo[0])
    cfg = load_config(argv[2], argv[3:])
    assert (cfg.algo.clip_high, cfg.algo.entropy_coef) == (0.28, -0.06)
    assert cfg.token_weighting.vppo_top_frac == 0.4
