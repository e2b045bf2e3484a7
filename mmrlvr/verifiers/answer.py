"""Answer verifiers: exact integer counts (and, with the verifier suite, math/choice/number)."""

from __future__ import annotations

import re

from mmrlvr.types import Verdict
from mmrlvr.verifiers.base import register_verifier
from mmrlvr.verifiers.extract import final_answer

_INT = re.compile(r"^[+-]?\d{1,18}$")
# an optional think block, then one answer block, and nothing else
_ANSWER_ONLY = re.compile(r"\s*(?:<think>(?:(?!</?think>|</?answer>).)*</think>\s*)?<answer>(?:(?!</?answer>).)*</answer>\s*", re.S)


def answer_only(completion: str) -> bool:
    """True when the completion is `[<think>..</think>] <answer>..</answer>` and nothing more."""
    return len(completion) <= 100_000 and _ANSWER_ONLY.fullmatch(completion) is not None


@register_verifier("count", "exact integer in a lone <answer>N</answer> (text after it scores 0)")
def count(completion: str, sample) -> Verdict:
    """1 when the completion is well formed and its answer is exactly the reference integer.

    Well-formedness is part of the score: otherwise text after the answer is free, and RL lets it
    drift into junk that later verifiers or users must read.
    """
    fmt = float(answer_only(completion))
    ans, failed = final_answer(completion, parts={"correct": 0.0, "format": fmt})
    if failed:
        return failed
    ans = ans.strip().replace(",", "")
    if not _INT.match(ans):
        return Verdict(0.0, f"answer {ans[:40]!r} is not an integer", {"correct": 0.0, "format": fmt})
    correct = float(int(ans) == int(sample.reference))
    reason = "correct" if correct else f"{int(ans)} != {sample.reference}"
    if correct and not fmt:
        reason = "correct answer, but text around <answer>...</answer>"
    return Verdict(correct * fmt, reason, {"correct": correct, "format": fmt})


# ---------------------------------------------------------------------------------------------
# math: symbolic / numeric equivalence with math-verify

_UNIT = re.compile(
    r"(?:\^\s*\{?\\circ\}?|°|\\degree|\s*(?:degrees?|deg|cm\^?2?|mm\^?2?|km|m\^?2?|m|units?|sq\.?\s*units?)\.?)\s*$",
    re.I,
)
_LHS = re.compile(r"^\s*[a-zA-Z](?:_\{?\w+\}?)?\s*=\s*(?=[^=])")
_LATEX_WRAP = re.compile(r"^\s*\$+|\$+\s*$|^\\\(|\\\)$|^\\\[|\\\]$")
MAX_MATH_CHARS = 1000  # longer "answers" are not answers; sympy on them is slow


def _clean_math(ans: str) -> str:
    # "\f" read by a JSON parser is a form feed: "\frac" arrives as "\x0crac" (seen in MATH-V)
    ans = _LATEX_WRAP.sub("", ans.replace("\x0c", "\\f").strip())
    ans = ans.replace("\\text{", "\\mathrm{").replace("\\!", "").replace("\\,", "").strip()
    ans = re.sub(r"\\mathrm\{\s*(?:cm|m|mm|km|units?|degrees?)\s*\}", "", ans)
    ans = _LHS.sub("", ans)
    for _ in range(2):
        ans = _UNIT.sub("", ans).strip()
    return ans


def math_equal(pred: str, ref: str) -> bool:
    """math-verify equivalence of two answers (its own signal timeouts off: we bound time outside)."""
    import math_verify.grader
    import math_verify.parser
    from math_verify import parse, verify

    # its timeouts use signal.alarm (main thread only); ours are enforced by the worker pool
    math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = True

    gold = parse(f"${_clean_math(ref)}$", parsing_timeout=None)
    guess = parse(f"${_clean_math(pred)}$", parsing_timeout=None)
    if not gold or not guess:
        return False
    return bool(verify(gold, guess, timeout_seconds=None))


@register_verifier("math", "symbolic/numeric equivalence with math-verify (units, degrees, x = tolerated)")
def math_answer(completion: str, sample) -> Verdict:
    """1 when the final answer equals the reference expression (1/2 = 0.5 = \\frac{1}{2})."""
    ans, failed = final_answer(completion)
    if failed:
        return failed
    if len(ans) > MAX_MATH_CHARS:
        return Verdict(0.0, f"answer of {len(ans)} characters is too long to be an answer")
    ok = math_equal(ans, str(sample.reference))
    return Verdict(float(ok), "equivalent" if ok else f"{ans[:60]!r} is not {sample.reference!r}")


math_answer.warmup = lambda: math_equal("1/2", "0.5")


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


@register_verifier("choice", "option letter (B, (B), 'The answer is B' or the option's text); two letters score 0")
def choice(completion: str, sample) -> Verdict:
    """1 when exactly one option is chosen and it is the reference letter."""
    ans, failed = final_answer(completion)
    if failed:
        return failed
    meta = getattr(sample, "meta", None) or {}
    picked = parse_choice(ans[:2000], meta.get("options"))
    if len(picked) != 1:
        return Verdict(0.0, f"{len(picked)} options chosen" if picked else f"no option in {ans[:40]!r}")
    (letter,) = picked
    ref = str(sample.reference).strip().strip("()").upper()
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


@register_verifier("number", "number within relative tolerance meta.rel_tol (default 0.05)")
def number(completion: str, sample) -> Verdict:
    """1 when |pred - ref| <= rel_tol * |ref| (exact when ref is 0)."""
    ans, failed = final_answer(completion)
    if failed:
        return failed
    pred = parse_number(ans[:200])
    if pred is None:
        return Verdict(0.0, f"no single number in {ans[:40]!r}")
    ref = float(str(sample.reference).replace(",", "").rstrip("%"))
    tol = float((getattr(sample, "meta", None) or {}).get("rel_tol", 0.05))
    ok = abs(pred - ref) <= tol * abs(ref) if ref != 0 else pred == 0
    return Verdict(float(ok), f"{pred:g} vs {ref:g} (rel_tol {tol})")
