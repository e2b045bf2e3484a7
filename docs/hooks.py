"""mkdocs hook: fill the `<!-- reference:NAME -->` markers of every page from the code (docs/gen_reference.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gen_reference, gen_metrics

from gen_reference import expand  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    return expand(markdown)
