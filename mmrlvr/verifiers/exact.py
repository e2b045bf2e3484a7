"""`exact`: a text answer equal to the reference after a stated normalisation.

Normalisation (both sides): Unicode NFKC, case folded (unless `meta.case_sensitive`), `$` math
delimiters and `\\text{...}` unwrapped, a thousands comma between digits removed ("1,000" ->
"1000"), a decimal point between digits kept ("3.5" stays), every other punctuation or symbol
character (Unicode categories P and S: . , ; : ! ? ' " ( ) % $ ...) and every control or format
character (category C) replaced by a space, runs of
whitespace collapsed, ends stripped. Articles and word order are NOT changed: "the UK" != "UK".
A list reference accepts any of its entries.
"""

from __future__ import annotations

import re
import unicodedata

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import BadReference, register_verifier
from mmrlvr.verifiers.extract import final_answer

MAX_CHARS = 2000  # a longer "answer" is not a short text answer
_TEXT = re.compile(r"\\text\{([^{}]{0,2000})\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DECIMAL = re.compile(r"(?<=\d)\.(?=\d)")
_KEEP = "\x00"  # stands for a protected decimal point while other punctuation is removed


def normalize_text(text: str, case_sensitive: bool = False) -> str:
    """The comparison form of an answer (see the module docstring for the rules)."""
    text = unicodedata.normalize("NFKC", str(text)[:MAX_CHARS])
    text = "".join(" " if unicodedata.category(ch)[0] == "C" else ch for ch in text)  # controls
    text = _TEXT.sub(r"\1", text)
    text = _THOUSANDS.sub("", text)
    text = _DECIMAL.sub(_KEEP, text)
    text = "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)
    text = " ".join(text.split()).replace(_KEEP, ".")
    return text if case_sensitive else text.casefold()


@register_verifier("exact", "text equal to the reference after normalisation (case, punctuation, spaces)", headline="accuracy")
def exact(completion: str, sample) -> Verdict:
    """1 when the normalised final answer equals the (or one of the) normalised reference(s)."""
    ans, failed = final_answer(completion, fallback_to_text=True, parts={"exact": 0.0})
    if failed:
        return failed
    if len(ans) > MAX_CHARS:
        return Verdict(0.0, f"answer of {len(ans)} characters is too long", {"exact": 0.0})
    meta = getattr(sample, "meta", None) or {}
    case = bool(meta.get("case_sensitive", False))
    refs = sample.reference if isinstance(sample.reference, (list, tuple)) else [sample.reference]
    if any(isinstance(r, float) and r != r for r in refs):  # NaN: str() gives "nan", which "nan" would match
        raise BadReference(f"exact reference {str(sample.reference)[:60]} is NaN")
    got = normalize_text(ans, case)
    wanted = [normalize_text(r, case) for r in refs if r is not None]
    if not got:
        return Verdict(0.0, "empty answer", {"exact": 0.0})
    ok = got in wanted
    reason = "exact match" if ok else f"{got[:40]!r} != {wanted[0][:40] if wanted else None!r}"
    return Verdict(float(ok), reason, {"exact": float(ok)})
