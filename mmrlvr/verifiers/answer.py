"""Answer verifiers: exact integer counts (and, with the verifier suite, math/choice/number)."""

from __future__ import annotations

import math
import re

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import BadReference, finite_reference, register_verifier
from mmrlvr.verifiers.extract import final_answer, final_boxes
from mmrlvr.verifiers.symbolic import math_equal, parse_reference, several_parts, warm_parser

_INT = re.compile(r"^[+-]?\d{1,18}$")
# an optional think block, then one answer block, and nothing else
_ANSWER_ONLY = re.compile(r"\s*(?:<think>(?:(?!</?think>|</?answer>).)*</think>\s*)?<answer>(?:(?!</?answer>).)*</answer>\s*", re.S)


def answer_only(completion: str) -> bool:
    """True when the completion is `[<think>..</think>] <answer>..</answer>` and nothing more."""
    return len(completion) <= 100_000 and _ANSWER_ONLY.fullmatch(completion) is not None


def _int_reference(ref) -> int:
    if isinstance(ref, float) and ref.is_integer():
        ref = int(ref)
    text = str(ref).strip()
    if isinstance(ref, bool) or not _INT.match(text):
        raise BadReference(f"count reference {text[:40]!r} is not an integer")
    return int(text)


@register_verifier("count", "exact integer in a lone <answer>N</answer> (text after it scores 0)", headline="accuracy")
def count(completion: str, sample) -> Verdict:
    """1 when the completion is well formed and its answer is exactly the reference integer.

    Well-formedness is part of the score: otherwise text after the answer is free, and RL lets it
    drift into junk that later verifiers or users must read.
    """
    ref = _int_reference(sample.reference)
    fmt = float(answer_only(completion))
    ans, failed = final_answer(completion, parts={"correct": 0.0, "format": fmt})
    if failed:
        return failed
    ans = ans.strip().replace(",", "")
    if not _INT.match(ans):
        return Verdict(0.0, f"answer {ans[:40]!r} is not an integer", {"correct": 0.0, "format": fmt})
    correct = float(int(ans) == ref)
    reason = "correct" if correct else f"{int(ans)} != {sample.reference}"
    if correct and not fmt:
        reason = "correct answer, but text around <answer>...</answer>"
    return Verdict(correct * fmt, reason, {"correct": correct, "format": fmt})


# ---------------------------------------------------------------------------------------------
# math: symbolic / numeric equivalence with math-verify

@register_verifier("math", "symbolic/numeric equivalence with math-verify (units, degrees, x = tolerated)", headline="accuracy")
def math_answer(completion: str, sample) -> Verdict:
    """1 when the final answer equals the reference expression (1/2 = 0.5 = \\frac{1}{2}).

    Towers, huge exponents and deep nesting score 0 before sympy sees them (see `symbolic`). A
    reference of several parts ("1, 2", "x = 1 \\text{ and } x = 2") needs the same set of parts,
    in any order; its parts may come in several boxes. With a one-part reference several different
    boxes are a hedge and score 0.
    """
    ref = sample.reference
    if isinstance(ref, float) and not math.isfinite(ref) or str(ref).strip().lower() == "nan":
        raise BadReference(f"math reference {ref!r} is not a number")
    gold = parse_reference(str(ref))  # a bad reference is named whatever the completion
    ans, failed = final_answer(completion)
    if failed and failed.reason.startswith("hedged") and several_parts(gold):
        boxes = final_boxes(completion)
        ans, failed = (", ".join(b.strip() for b in boxes), None) if boxes else (ans, failed)
    if failed:
        return failed
    ok, why = math_equal(ans, str(sample.reference))
    return Verdict(float(ok), "equivalent" if ok else why)


math_answer.warmup = warm_parser  # imports and parser caches, outside the time bound


# ---------------------------------------------------------------------------------------------
# choice: option letters

_LONE_LETTER = re.compile(r"\(?([A-Z])\)?[.:]?")
_LEADING_LABEL = re.compile(r"\(?([A-Z])[\).:]\s+\S.*", re.S)


def parse_choice(ans: str, options: list[str] | None = None, letters: str = "ABCDEFGHIJ") -> set[str]:
    """Letters a final answer picks: "B", "(B)", "B.", "B) text", "the answer is B", option text.

    More than one letter in the answer ("A or B", "A, C") returns them all, and scores 0.
    """
    ans = ans.strip().strip("*").strip()
    ans = re.sub(r"^(?:the\s+)?(?:correct\s+)?(?:answer|option|choice)\s*(?:is|:)?\s*", "", ans, flags=re.I)
    ans = re.sub(r"^\\text\{(.*)\}$", r"\1", ans).strip().rstrip(".").strip()
    valid = letters[: len(options)] if options else letters
    if options:
        for i, opt in enumerate(options):
            if ans.casefold() == str(opt).strip().casefold():
                return {valid[i]}
    for pattern in (_LONE_LETTER, _LEADING_LABEL):
        m = pattern.fullmatch(ans)
        if m and m.group(1) in valid:
            return {m.group(1)}
    found = set(re.findall(r"(?<![A-Za-z])\(?([A-Z])\)?(?![A-Za-z])", ans))
    return {x for x in found if x in valid}


@register_verifier("choice", "option letter (B, (B), 'The answer is B' or the option's text); two letters score 0", headline="accuracy")
def choice(completion: str, sample) -> Verdict:
    """1 when exactly one option is chosen and it is the reference letter."""
    ref = str(sample.reference).strip().strip("()").upper()
    if len(ref) != 1 or not "A" <= ref <= "Z":
        raise BadReference(f"choice reference {str(sample.reference)[:40]!r} is not one option letter")
    ans, failed = final_answer(completion)
    if failed:
        return failed
    meta = getattr(sample, "meta", None) or {}
    options = meta.get("options")
    if options is not None and not isinstance(options, (list, tuple)):
        raise BadReference(f"meta.options {str(options)[:40]!r} is not a list")
    picked = parse_choice(ans[:2000], options)
    if len(picked) != 1:
        return Verdict(0.0, f"{len(picked)} options chosen" if picked else f"no option in {ans[:40]!r}")
    (letter,) = picked
    return Verdict(float(letter == ref), f"chose {letter}, reference {ref}")


# ---------------------------------------------------------------------------------------------
# number: relaxed numeric accuracy (ChartQA-style)

_NUM = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def parse_number(text: str) -> float | None:
    """The one number in a short answer ("1,250", "12.5%", "$3.2 million" -> 3.2), else None."""
    nums = _NUM.findall(text.replace("\u2212", "-"))
    if len(nums) != 1:
        return None
    value = float(nums[0].replace(",", ""))
    return value if value == value and abs(value) != float("inf") else None


def _number_reference(sample) -> tuple[float, float]:
    """(reference, rel_tol), both finite, tol >= 0; else BadReference (inf would accept anything)."""
    raw = sample.reference
    text = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else str(raw).replace(",", "").rstrip("%")
    (ref,) = finite_reference([text], 1, "number reference")
    tol = (getattr(sample, "meta", None) or {}).get("rel_tol", 0.05)
    (tol,) = finite_reference([tol], 1, "meta.rel_tol")
    if tol < 0:
        raise BadReference(f"meta.rel_tol {tol} is negative")
    return ref, tol


@register_verifier("number", "number within relative tolerance meta.rel_tol (default 0.05)", headline="accuracy")
def number(completion: str, sample) -> Verdict:
    """1 when |pred - ref| <= rel_tol * |ref| (exact when ref is 0)."""
    ref, tol = _number_reference(sample)
    ans, failed = final_answer(completion)
    if failed:
        return failed
    pred = parse_number(ans[:200])
    if pred is None:
        return Verdict(0.0, f"no single number in {ans[:40]!r}")
    ok = abs(pred - ref) <= tol * abs(ref) if ref != 0 else pred == 0
    return Verdict(float(ok), f"{pred:g} vs {ref:g} (rel_tol {tol})")
