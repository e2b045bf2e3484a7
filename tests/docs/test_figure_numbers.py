"""No figure sits beside numbers it does not show: the record make_figures writes with curves.png
matches the PNG, and every page quoting held-out accuracy next to the figure quotes the record's
(docs/figure_numbers.py; the mkdocs hook warns on the same)."""

from __future__ import annotations

import json

from .conftest import DOCS, load_docs_module

numbers = load_docs_module("figure_numbers")
FIGURES = DOCS / "figures"


def test_the_curves_record_describes_the_png_and_the_home_page_quotes_it():
    assert numbers.stale_record(FIGURES, "curves") is None
    rec = json.loads((FIGURES / "curves.json").read_text())
    first, last = rec["eval_accuracy"][0][1], rec["eval_accuracy"][-1][1]
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    assert f"{first:.3f} -> {last:.3f}" in home  # the home page shows the figure's own numbers beside it
    problems = [p for page in sorted(DOCS.rglob("*.md"))
                for p in numbers.figure_number_problems(page.read_text(encoding="utf-8"),
                                                        str(page.relative_to(DOCS)), FIGURES)]
    assert problems == []


def test_an_old_figure_beside_new_numbers_is_named(tmp_path):
    """The home page as it was: a 40-step figure (0.71 -> 0.82) beside another run's numbers."""
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "curves.png").write_bytes(b"\x89PNG old figure")
    import hashlib

    digest = hashlib.sha256(b"\x89PNG old figure").hexdigest()
    (figures / "curves.json").write_text(json.dumps({"png_sha256": digest, "eval_accuracy": [[0, 0.71], [40, 0.82]]}))
    page = ("Intro.\n\n`held-out accuracy: before RL 0.535 -> after RL 1.000 (+46.5 points, n=256)`\n\n"
            "![curves](figures/curves.png)\n\nAfter: 0.71 -> 0.82 in 40 steps.\n")
    assert numbers.figure_number_problems(page, "index.md", figures) == [
        "index.md:5: curves.png shows held-out accuracy 0.710 -> 0.820 (figures/curves.json), the text beside it "
        "says 0.535 -> 1.000"]
    assert numbers.stale_record(figures, "curves") is None
    (figures / "curves.png").write_bytes(b"\x89PNG redrawn, record not")
    assert numbers.stale_record(figures, "curves") == (
        "figures/curves.json was written for another curves.png: rerun python docs/make_figures.py")
    assert numbers.figure_number_problems("![curves](figures/curves.png)\n", "p.md", figures) == [
        "p.md:1: figures/curves.json was written for another curves.png: rerun python docs/make_figures.py"]
