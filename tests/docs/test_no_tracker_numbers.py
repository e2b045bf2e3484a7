"""No tracker numbers in code, configs, tests or docs: the text says what a thing does, not which
ticket asked for it. The same search as `grep -rnE "[Ii]ssue [0-9]+|Item [0-9]+" ...`."""

from __future__ import annotations

import re

from .conftest import ROOT

PATHS = ("mmrlvr", "tasks", "configs", "tests", "docs", "README.md", "benchmarks")
TRACKER = re.compile(r"[Ii]ssue [0-9]+|Item [0-9]+")


def tracker_numbers(root=ROOT) -> list[str]:
    hits = []
    for name in PATHS:
        top = root / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else []
        for path in files:
            if "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):  # binary files (PNGs, checkpoints) hold no prose
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if TRACKER.search(line):
                    hits.append(f"{path.relative_to(root)}:{n}: {line.strip()[:120]}")
    return hits


def test_the_search_finds_a_planted_number(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("fine\nas asked in " + "Issue" + " 12\n")
    (tmp_path / "README.md").write_text("item 3 is lower case and fine\n")
    assert tracker_numbers(tmp_path) == ["docs/a.md:2: as asked in " + "Issue" + " 12"]


def test_no_tracker_numbers():
    assert tracker_numbers() == []
