"""No page renders broken: a code fence never closed, or one left open that swallows the page's
headings and the next block, is named by page and line (docs/fences.py), and the strict site
build fails on it (the hook warns)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from .conftest import DOCS, ROOT, load_docs_module
from .test_site_build import build

fences = load_docs_module("fences")

GOOD = ("# Page\n\n```bash\npip install x\n\n# then run it\nrun x\n```\n\n"  # a comment sits beside its code
        "````markdown\n\n## shown as is\n\n```yaml\na: 1\n```\n````\n\n"  # Markdown shown on purpose
        "```markdown\n\n# also as is\n\n```yaml\n```\n")
# the evaluation how-to as it was: a block opened and never closed swallows the next heading and block
SWALLOWED = "# Page\n\n```bash\nmmrlvr eval cfg.yaml\n\n## A checkpoint, afterwards\n\n```bash\nmmrlvr eval x\n```\n"


def test_every_page_has_sound_fences():
    pages = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]  # the README renders on the repository's front page
    problems = [p for page in pages
                for p in fences.fence_problems(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))]
    assert problems == []


def test_planted_faults_are_named_by_line(tmp_path):
    assert fences.fence_problems(GOOD, "good.md") == []  # a comment in code, Markdown shown in a markdown block
    unclosed = tmp_path / "unclosed.md"
    unclosed.write_text("# Page\n\nText.\n\n~~~yaml\na: 1\n")
    assert fences.fence_problems(unclosed.read_text(), "unclosed.md") == [
        "unclosed.md:5: the code fence opened here (~~~yaml) is never closed"]
    assert fences.fence_problems(SWALLOWED, "eval.md") == [
        "eval.md:6: a heading (## A checkpoint, afterwards) inside the code block opened at line 3: "
        "the block swallowed the page's structure",
        "eval.md:8: a fence with an info string (```bash) inside the code block opened at line 3: that block was left open"]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="mkdocs and mkdocs-material are not installed")
def test_the_strict_build_fails_on_a_planted_unclosed_fence(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    for name in ("mmrlvr", "benchmarks", "configs"):  # what the generators read, beside the copy
        (tmp_path / name).symlink_to(ROOT / name)
    page = docs / "how-to" / "evaluation.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n```bash\nmmrlvr eval --help\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config.write_text(text.replace("docs_dir: docs", f"docs_dir: {docs}").replace("  - docs/hooks.py", f"  - {docs}/hooks.py"))
    done = build(tmp_path, str(config))
    line = len(page.read_text(encoding="utf-8").split("\n")) - 2  # the planted fence, counted from 1
    assert done.returncode != 0
    assert f"how-to/evaluation.md:{line}: the code fence opened here (```bash) is never closed" in done.stdout + done.stderr
