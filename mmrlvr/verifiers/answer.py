"""Answer verifiers: exact integer counts (and, with the verifier suite, math/choice/number)."""

from __future__ import annotations

import re

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import register_verifier
from mmrlvr.verifiers.extract import Hedged, extract_answer

_INT = re.compile(r"^[+-]?\d{1,18}$")


@register_verifier("count", "integer answer equals the reference count exactly")
def count(completion: str, sample) -> Verdict:
    """1 when the final answer is exactly the reference integer."""
    try:
        ans = extract_answer(completion)
    except Hedged as exc:
        return Verdict(0.0, f"hedged: {exc}", {"parsed": 0.0})
    if ans is None:
        return Verdict(0.0, "no final answer", {"parsed": 0.0})
    ans = ans.strip().replace(",", "")
    if not _INT.match(ans):
        return Verdict(0.0, f"answer {ans[:40]!r} is not an integer", {"parsed": 0.0})
    ok = int(ans) == int(sample.reference)
    return Verdict(float(ok), "correct" if ok else f"{int(ans)} != {sample.reference}", {"parsed": 1.0})
