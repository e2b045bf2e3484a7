"""Answer extraction shared by every verifier.

The final answer is the content of the last `<answer>...</answer>`, else the last `\\boxed{...}`,
else a final "answer is ..." phrase. Hedging (two different final answers) yields no answer.
"""

from __future__ import annotations

import re

MAX_CHARS = 20_000  # completions longer than this are judged by their tail only
ANSWER_IS_CHARS = 2_000  # an "answer is ..." phrase is looked for in this tail only

# Every pattern here is linear in the text: literal tags found with str-speed scans, no nested or
# unbounded-overlapping quantifiers (a lazy `<answer>(.*?)</answer>` is quadratic on unclosed tags).
_OPEN, _CLOSE = re.compile(r"<answer>", re.I), re.compile(r"</answer>", re.I)
_ANSWER_IS = re.compile(r"answer[ \t]{0,8}(?:is|:)", re.I)
_BOXED = re.compile(r"\\boxed *\{")
_BRACE = re.compile(r"[{}]")


class Hedged(ValueError):
    """The completion gives more than one different final answer."""


def tag_contents(text: str) -> list[str]:
    """Contents of every `<answer>...</answer>` (case-insensitive), as a lazy regex would pair them:
    from each opening tag to the first closing tag after it. One pass over the text."""
    closes = [m.span() for m in _CLOSE.finditer(text)]
    out, pos, c = [], 0, 0
    for m in _OPEN.finditer(text):
        if m.start() < pos:
            continue
        while c < len(closes) and closes[c][0] < m.end():
            c += 1
        if c == len(closes):
            break
        out.append(text[m.end() : closes[c][0]])
        pos = closes[c][1]
    return out


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}` with balanced braces (braces nest, so no single regex)."""
    out, pos = [], 0
    while (m := _BOXED.search(text, pos)) is not None:
        depth = 0
        for b in _BRACE.finditer(text, m.end() - 1):
            depth += 1 if b.group() == "{" else -1
            if depth == 0:
                out.append(text[m.end() : b.start()])
                pos = b.end()
                break
        else:
            return out  # unclosed: no later box can close either
    return out


def _norm(ans: str) -> str:
    return re.sub(r"\s+", " ", ans.strip()).strip(" .")


def _one(candidates: list[str]) -> str:
    distinct = {_norm(c) for c in candidates if _norm(c)}
    if len(distinct) > 1:
        raise Hedged(f"{len(distinct)} different final answers")
    return candidates[-1].strip()


def _answer_phrase(text: str) -> str | None:
    """What follows the first "answer is" / "answer:" in the tail, without a final full stop."""
    m = _ANSWER_IS.search(text)
    if m is None:
        return None
    rest = text[m.end() :].strip()
    rest = rest[1:].strip() if rest.startswith(":") else rest
    rest = rest[:-1].rstrip() if rest.endswith(".") else rest
    return rest or None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, or None; raises Hedged on two different answers."""
    text = text[-MAX_CHARS:]
    tags = tag_contents(text)
    if tags:
        inner = _one(tags)
        boxes = boxed_contents(inner)
        return _one(boxes) if boxes else inner
    boxes = boxed_contents(text)
    if boxes:
        return _one(boxes)
    return _answer_phrase(text[-ANSWER_IS_CHARS:])


def final_boxes(text: str) -> list[str]:
    """Every `\\boxed{...}` of the final answer: those of the one answer tag when there is one
    (none when tags disagree), else those of the whole text. For a reference with several parts,
    where several boxes are one answer set rather than a hedge."""
    text = text[-MAX_CHARS:]
    tags = tag_contents(text)
    if tags:
        if len({_norm(t) for t in tags if _norm(t)}) > 1:
            return []
        return boxed_contents(tags[-1])
    return boxed_contents(text)


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
