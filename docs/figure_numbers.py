"""A figure beside numbers it does not show is caught before the site is built.

`docs/make_figures.py` writes, with each figure whose numbers a page may quote, a record
`figures/NAME.json`: the PNG's sha256 and its held-out accuracy per evaluated step. A PNG redrawn
without its record (or the other way round) no longer matches the hash; a page that quotes
accuracy ("0.695 -> 1.000") in the paragraph just above or below the figure must quote the
record's first and last value. The mkdocs hook warns on each problem (an error under --strict).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

IMAGE = re.compile(r"^!\[[^\]]*\]\(((?:\.\./)*figures/([\w-]+)\.png)\)\s*$")
PAIR = re.compile(r"(\d\.\d+) -> (?:after RL )?(\d\.\d+)")


def record(figures: Path, name: str) -> dict | None:
    path = figures / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def stale_record(figures: Path, name: str) -> str | None:
    """Why `figures/NAME.json` does not describe `figures/NAME.png` (None when it does, or there is none)."""
    rec = record(figures, name)
    if rec is None:
        return None
    png = figures / f"{name}.png"
    digest = hashlib.sha256(png.read_bytes()).hexdigest() if png.is_file() else None
    if rec.get("png_sha256") != digest:
        return f"figures/{name}.json was written for another {name}.png: rerun python docs/make_figures.py"
    return None


def _paragraph(lines: list[str], n: int, step: int) -> str:
    """The paragraph next to line n, above (step -1) or below (+1)."""
    i = n + step
    while 0 <= i < len(lines) and not lines[i].strip():
        i += step
    out = []
    while 0 <= i < len(lines) and lines[i].strip():
        out.append(lines[i])
        i += step
    return " ".join(out[::step])


def figure_number_problems(markdown: str, page: str, figures: Path) -> list[str]:
    """One "PAGE:LINE: what" per figure beside numbers it does not show."""
    lines, out = markdown.split("\n"), []
    for n, line in enumerate(lines):
        m = IMAGE.match(line.strip())
        rec = record(figures, m.group(2)) if m else None
        if rec is None:
            continue
        stale = stale_record(figures, m.group(2))
        if stale:
            out.append(f"{page}:{n + 1}: {stale}")
        acc = rec["eval_accuracy"]
        shown = (f"{acc[0][1]:.3f}", f"{acc[-1][1]:.3f}")
        for side in (_paragraph(lines, n, -1), _paragraph(lines, n, 1)):
            for pair in PAIR.findall(side):
                if (f"{float(pair[0]):.3f}", f"{float(pair[1]):.3f}") != shown:
                    out.append(f"{page}:{n + 1}: {m.group(2)}.png shows held-out accuracy {shown[0]} -> {shown[1]} "
                               f"(figures/{m.group(2)}.json), the text beside it says {pair[0]} -> {pair[1]}")
    return out
