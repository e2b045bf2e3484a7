"""The site builds in strict mode: a broken link, a missing anchor or nav page, an unknown generated
block, a snippet include whose file is gone all fail the build (mkdocs.yml `strict` + `validation`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason='mkdocs and mkdocs-material are not installed (pip install -e ".[docs]"; the dev extra includes them)',
)


def build(tmp_path, config: str = "mkdocs.yml") -> subprocess.CompletedProcess:
    # never -q: it raises the log level above WARNING, and strict mode counts only warnings it sees
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_the_site_builds_strictly(tmp_path):
    done = build(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = tmp_path / "site"
    config = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    assert "algo.clip_low" in config and "task.args.flaw_prob" in config  # the generated tables are in
    assert (site / "figures" / "curves.png").is_file()


def test_a_missing_anchor_fails_the_build(tmp_path):
    """The strict settings are live: the same site with one link to a heading that does not exist fails."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(ROOT / "docs"), str(docs)], check=True)
    for name in ("mmrlvr", "benchmarks", "configs"):  # what the generators read, beside the copy
        (tmp_path / name).symlink_to(ROOT / name)
    page = docs / "reference" / "metrics.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [the keys](config.md#no-such-heading).\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config.write_text(text.replace("docs_dir: docs", f"docs_dir: {docs}").replace("  - docs/hooks.py", f"  - {docs}/hooks.py"))
    done = build(tmp_path, str(config))
    assert done.returncode != 0
    assert "no-such-heading" in done.stdout + done.stderr
