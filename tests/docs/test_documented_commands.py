"""Every command the docs tell a reader to type exists: each `mmrlvr SUBCOMMAND` in a code span or a
shell block is a subcommand the CLI has (a documented `mmrlvr validate` once did not exist), and the
hub's download command is the one the install ships (`hf`; `huggingface-cli` is gone)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mmrlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", *sorted((ROOT / "configs").glob("*.yaml"))]
SPAN = re.compile(r"`mmrlvr ([a-z][a-z-]*)")
LINE = re.compile(r"^\s*(?:\$ )?mmrlvr ([a-z][a-z-]*)", re.M)


def documented_subcommands() -> dict[str, str]:
    """subcommand -> the first page that shows it being typed."""
    found: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = "\n".join(re.findall(r"```(?:bash|sh|console|shell)?\n(.*?)```", text, re.S))
        for name in [*SPAN.findall(text), *LINE.findall(blocks)]:
            found.setdefault(name, str(page.relative_to(ROOT)))
    return found


def test_the_scan_finds_the_commands_people_type():
    assert {"train", "eval", "plan", "validate", "rollout-server"} <= set(documented_subcommands())


@pytest.mark.parametrize("name,page", sorted(documented_subcommands().items()))
def test_every_documented_subcommand_exists(name, page, capsys):
    with pytest.raises(SystemExit) as stop:
        main([name, "--help"])
    assert stop.value.code == 0, f"{page} shows `mmrlvr {name}`, which the CLI does not have"


def test_the_hub_download_command_is_the_shipped_one():
    assert shutil.which("hf") is not None  # installed by huggingface_hub, a dependency
    stale = [str(p.relative_to(ROOT)) for p in PAGES if "huggingface-cli" in p.read_text(encoding="utf-8")]
    assert stale == []
