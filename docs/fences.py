"""Code fences that would render a page broken, found in its Markdown before the site is built.

`mkdocs build --strict` passes a page whose code block is never closed: the rest of the page
renders as code. `fence_problems` names each such fault by line, and the mkdocs hook
(`docs/hooks.py`) turns each into a warning, so the strict build (and `tests/docs/`) fails on:
- a fence never closed (the page ends inside a code block);
- an opening fence with an info string (```bash) inside a block it would have closed were it
  bare: the block above was left open and swallowed what follows;
- a Markdown heading inside a code block, set off by blank lines as a page heading is: the
  page's structure swallowed by an open block (a `# comment` in a shell or YAML block sits
  beside its code, without a blank line on both sides).
Blocks whose info string is markdown (or md) show Markdown on purpose and are left alone.
"""

from __future__ import annotations

import re

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
HEADING = re.compile(r"^#{1,6} \S")
SHOWN_AS_IS = ("markdown", "md")


def fence_problems(markdown: str, page: str) -> list[str]:
    """One "PAGE:LINE: what" per fault (lines counted from 1); [] for a sound page."""
    lines = markdown.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or (m.group(1)[0] == "`" and "`" in m.group(2)):  # ``inline`` code, not a fence
            i += 1
            continue
        fence, info, start, j = m.group(1), m.group(2).strip(), i, i + 1
        as_is = info.split(" ")[0].lower() in SHOWN_AS_IS if info else False
        while j < len(lines):
            c = FENCE.match(lines[j])
            same = c and c.group(1)[0] == fence[0] and len(c.group(1)) >= len(fence)
            if same and not c.group(2).strip():
                break
            if same and not as_is:
                out.append(f"{page}:{j + 1}: a fence with an info string ({lines[j].strip()}) inside the code block "
                           f"opened at line {start + 1}: that block was left open")
            elif not as_is and HEADING.match(lines[j]) and _set_off(lines, j):
                out.append(f"{page}:{j + 1}: a heading ({lines[j].strip()}) inside the code block opened at line "
                           f"{start + 1}: the block swallowed the page's structure")
            j += 1
        if j == len(lines):
            out.append(f"{page}:{start + 1}: the code fence opened here ({lines[start].strip()}) is never closed")
        i = j + 1
    return out


def _set_off(lines: list[str], n: int) -> bool:
    """A line with a blank line (or the block's edge) above and below, as a page heading stands."""
    above = n == 0 or not lines[n - 1].strip()
    below = n + 1 >= len(lines) or not lines[n + 1].strip()
    return above and below
