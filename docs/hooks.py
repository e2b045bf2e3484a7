"""mkdocs hook: fill the `<!-- reference:NAME -->` markers of every page from the code (docs/gen_reference.py),
and warn (an error under `--strict`) on a code fence that would render the page broken (docs/fences.py)
or a figure beside numbers it does not show (docs/figure_numbers.py)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gen_reference, gen_metrics, fences

from fences import fence_problems  # noqa: E402
from figure_numbers import figure_number_problems  # noqa: E402
from gen_reference import expand  # noqa: E402

log = logging.getLogger("mkdocs.hooks.fences")


def on_page_markdown(markdown, page, config, files):
    figures = Path(config["docs_dir"]) / "figures"
    for problem in [*fence_problems(markdown, page.file.src_uri), *figure_number_problems(markdown, page.file.src_uri, figures)]:
        log.warning(problem)
    return expand(markdown)
