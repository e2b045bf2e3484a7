"""mkdocs hook: fill the `<!-- reference:NAME -->` markers of every page from the code (docs/gen_reference.py),
and warn (an error under `--strict`) on a code fence that would render the page broken (docs/fences.py)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gen_reference, gen_metrics, fences

from fences import fence_problems  # noqa: E402
from gen_reference import expand  # noqa: E402

log = logging.getLogger("mkdocs.hooks.fences")


def on_page_markdown(markdown, page, config, files):
    for problem in fence_problems(markdown, page.file.src_uri):
        log.warning(problem)
    return expand(markdown)
