"""Answer extraction shared by every verifier.

The final answer is the content of the last `<answer>...</answer>`, else the last `\\boxed{...}`,
else a final "answer is ..." phrase. Hedging (two different final answers) yields no answer.
"""

from __future__ import annotations

import re

MAX_CHARS = 20_000  # completions longer than this are judged by their tail only

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*:?\s*(.+?)\s*(?:\.\s*)?$", re.I | re.S)


class Hedged(ValueError):
    """The completion gives more than one different final answer."""


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` with balanced braces (no regex: braces nest)."""
    out, i = [], 0
    while True:
        j = text.find("\\boxed", i)
        if j < 0:
            return out
        k = j + len("\\boxed")
        while k < len(text) and text[k] == " ":
            k += 1
        if k >= len(text) or text[k] != "{":
            i = k
            continue
        depth, start = 0, k + 1
        for m in range(k, len(text)):
            if text[m] == "{":
                depth += 1
            elif text[m] == "}":
                depth -= 1
                if depth == 0:
                    out.append(text[start:m])
                    break
        else:
            return out
        i = m + 1


def _norm(ans: str) -> str:
    return re.sub(r"\s+", " ", ans.strip()).strip(" .")


def _one(candidates: list[str]) -> str:
    distinct = {_norm(c) for c in candidates if _norm(c)}
    if len(distinct) > 1:
        raise Hedged(f"{len(distinct)} different final answers")
    return candidates[-1].strip()


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, or None; raises Hedged on two different answers."""
    text = text[-MAX_CHARS:]
    tags = _ANSWER_TAG.findall(text)
    if tags:
        inner = _one(tags)
        boxes = boxed_contents(inner)
        return _one(boxes) if boxes else inner
    boxes = boxed_contents(text)
    if boxes:
        return _one(boxes)
    m = _ANSWER_IS.search(text[-2000:])
    if m:
        return m.group(1).strip()
    return None


def final_answer(completion: str, fallback_to_text: bool = False, parts: dict | None = None):
    """(answer, None), or (None, a zero Verdict saying why) when there is no single final answer.

    With `fallback_to_text`, a completion without an answer tag, box or phrase is itself the
    answer (boxes, orders and segments are often written bare).
    """
    from mmrlvr.types import Verdict

    try:
        ans = extract_answer(completion)
    except Hedged as exc:
        return None, Verdict(0.0, f"hedged: {exc}", dict(parts or {}))
    if ans is None:
        if fallback_to_text:
            return completion[-MAX_CHARS:], None
        return None, Verdict(0.0, "no final answer", dict(parts or {}))
    return ans, None
