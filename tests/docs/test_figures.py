"""docs/figures: every PNG is listed in its README (the names other pages link to), every listed
one exists, each is small, and every figure a page links to is there."""

from __future__ import annotations

import re

from .conftest import DOCS

LIMIT = 200_000  # bytes; docs/make_figures.py checks the same when it writes them


def test_figures_are_listed_small_and_present():
    folder = DOCS / "figures"
    listed = set(re.findall(r"^\| `([\w-]+\.png)` \|", (folder / "README.md").read_text(encoding="utf-8"), re.M))
    on_disk = {p.name for p in folder.glob("*.png")}
    assert {"curves.png", "boxes.png", "token_roles.png", "attention.png"} <= listed
    assert listed == on_disk, f"listed only: {sorted(listed - on_disk)}; not listed: {sorted(on_disk - listed)}"
    assert {p.name: p.stat().st_size for p in folder.glob("*.png") if p.stat().st_size > LIMIT} == {}
    for p in folder.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p.name


def test_every_linked_figure_exists():
    links = {(page.relative_to(DOCS), m) for page in DOCS.rglob("*.md")
             for m in re.findall(r"\]\(((?:\.\./)*figures/[^)\s]+)\)", page.read_text(encoding="utf-8"))}
    assert links, "the pages show figures"
    missing = [f"{page}: {link}" for page, link in links if not (DOCS / page).parent.joinpath(link).resolve().is_file()]
    assert missing == []
