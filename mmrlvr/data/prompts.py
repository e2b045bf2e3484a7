"""Chat messages from a question with image placeholders, and the answer-format instructions.

`<image>`, `<image1>`, `<image2>` ... in a question become the chat template's image slots, in the
order they appear (`<imageK>` is the row's K-th image, `<image>` the next one not yet placed).
Images that no placeholder names go first, before the text, in their row order.
MATH-V convention: a row with ONE image whose question names `<image1>`, `<image2>`, ... stores
all figures in that one composite image, so it fills the first placeholder and the later ones
are removed. Any other placeholder naming an image the row lacks makes the row bad.
"""

from __future__ import annotations

import re
from typing import Sequence

from mmrlvr.data.io import BadRow

_PLACEHOLDER = re.compile(r"<image(\d{0,3})>")

TEMPLATES = {
    "answer": "Give the final answer inside <answer></answer>.",
    "think": "Think step by step inside <think></think>, then give the final answer inside <answer></answer>.",
    "plain": "",
}


def instruction(template: str) -> str:
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; known: {', '.join(TEMPLATES)}")
    return TEMPLATES[template]


def build_messages(question: str, images: Sequence, suffix: str = "") -> tuple[tuple[dict, ...], tuple]:
    """(messages, images in slot order) for one user turn; raises BadRow on a dangling placeholder."""
    content: list[dict] = []
    slots: list = []
    used: set[int] = set()
    nxt, pos = 0, 0
    pieces: list[tuple[str, int | None]] = []
    found = list(_PLACEHOLDER.finditer(question))
    composite = len(images) == 1 and len(found) > 1 and all(m.group(1) for m in found)
    for m in found:
        if composite and used:  # MATH-V: later panels are inside the one composite image
            pieces.append((question[pos : m.start()], None))
            pos = m.end()
            continue
        pieces.append((question[pos : m.start()], None))
        if composite:
            k = 0
        elif m.group(1):
            k = int(m.group(1)) - 1
        else:
            while nxt in used:
                nxt += 1
            k = nxt
        if not 0 <= k < len(images):
            raise BadRow(f"question names {m.group(0)} but the row has {len(images)} image(s)")
        used.add(k)
        pieces.append(("", k))
        pos = m.end()
    pieces.append((question[pos:], None))
    for j, img in enumerate(images):  # images no placeholder names: first
        if j not in used:
            content.append({"type": "image"})
            slots.append(img)
    for text, k in pieces:
        if k is not None:
            content.append({"type": "image"})
            slots.append(images[k])
        elif text.strip():
            content.append({"type": "text", "text": text.strip()})
    if suffix:
        has_text = any(c["type"] == "text" for c in content)
        content.append({"type": "text", "text": ("\n" if has_text else "") + suffix})
    return ({"role": "user", "content": content},), tuple(slots)
