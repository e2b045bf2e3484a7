"""The contributor's map names files and tests that exist: a move that leaves the map pointing at an
old path (a file that went to another folder, a test that was renamed) fails here, not in a reader's hands."""

from __future__ import annotations

import re

from .conftest import ROOT

MAP = ROOT / "docs" / "contributing.md"
FOLDERS = ("mmrlvr/", "tests/", "tasks/", "configs/", "docs/", "benchmarks/")


def named_paths(text: str) -> list[str]:
    """Every `code span` of the map that is a repository path (placeholders like <name> left out)."""
    spans = re.findall(r"`([^`\n]+)`", text)
    return [s for s in spans if s.startswith(FOLDERS) and "<" not in s and " " not in s]


def missing(text: str) -> list[str]:
    """The named paths (and `file::test` names) that are not in the repository."""
    out = []
    for span in named_paths(text):
        path, _, test = span.partition("::")
        file = ROOT / path
        if not file.exists():
            out.append(span)
        elif test and not re.search(rf"^\s*def {re.escape(test)}\(", file.read_text(encoding="utf-8"), re.M):
            out.append(span)
    return out


def test_every_file_and_test_the_map_names_exists():
    assert len(named_paths(MAP.read_text(encoding="utf-8"))) > 30  # the check reads the map's spans
    assert missing(MAP.read_text(encoding="utf-8")) == []


def test_an_old_path_or_a_renamed_test_is_caught():
    """The check is not blind: a moved file and a test name that is not in its file are both reported."""
    text = "`mmrlvr/config/validate.py` and `tests/test_layers.py::test_no_such_test` and `tasks/<name>.py`"
    assert missing(text) == ["mmrlvr/config/validate.py", "tests/test_layers.py::test_no_such_test"]
