"""Math equivalence with math-verify, guarded so that no short answer can keep sympy busy.

sympy evaluates integer powers and factorials as it builds an expression, so `9^{9^{9}}` (nine
characters) asks for a 370-million-digit integer in C, where no signal can stop it. Three guards:
a text pre-check refuses towers, huge exponents/factorials and deep nesting before parsing; a
check of the parsed expression refuses anything large before `verify`; and math-verify's own
time-outs bound parse and verify (they use `signal.alarm`, so they run only in a main thread: the
worker pool's and in-process scoring; off the main thread the pool's time-out is the bound).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from contextlib import contextmanager
from functools import lru_cache

from mmrlvr.verifiers.base import VERIFIER_FAILED, BadReference

MAX_MATH_CHARS = 1000  # longer "answers" are not answers
MAX_DEPTH = 12  # brackets nested deeper than this are not an answer (a 60-deep \frac is)
MAX_EXPONENT = 1000  # larger integer exponents or factorials are refused: sympy would evaluate them
MAX_DIGITS = 40  # longer digit runs are not answers; sympy multiplies them out at full precision
MAX_OPERATORS = 60  # x+x+...+x (300 terms) takes the LaTeX parser seconds
MAX_NODES = 2000  # parsed expressions larger than this are refused before verify
TIMEOUT_S = 2  # math-verify's own time-outs, seconds (an integer): parse + verify stay under the pool's 5 s

# a squared or cubed unit at the end: math-verify reads "5 m^2" as 5*m**2 (plain units, degrees,
# "\text{cm}^2" it drops itself)
_AREA_UNIT = re.compile(r"\s{0,3}(?:cm|mm|km|m|units?)\s{0,3}\^\s{0,3}\{?[23]\}?\.?\s{0,3}$")
# one formula in one pair of delimiters, nothing outside: "$x$", "$$x$$", "\(x\)", "\[x\]"
_ONE_FORMULA = re.compile(r"\s{0,8}(?:\$\$([^$]*)\$\$|\$([^$]*)\$|\\\((.*)\\\)|\\\[(.*)\\\])\s{0,8}", re.S)
# a formula closed in its delimiters, or a box ("\$5" is a dollar sign, not a delimiter); used on
# texts of at most MAX_MATH_CHARS, so the lazy scans stay cheap
_DELIMITED = re.compile(r"(?<!\\)\$[^$]{0,1000}?(?<!\\)\$|\\\(.{0,1000}?\\\)|\\\[.{0,1000}?\\\]|\\boxed", re.S)
_STRAY_DOLLAR = re.compile(r"^\s{0,8}(?<!\\)\${1,2}|(?<!\\)\${1,2}\s{0,8}$")
# a thousands separator written as a thin space between digit groups: "32\,349", "1\,000\,000"
_THIN_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3})((?:\\,\d{3})+)(?!\d|\.\d)")
_TRAILING_STOP = re.compile(r"(?<!\.)\.\s{0,8}$")
_BRACKET = re.compile(r"[{}()\[\]]")
_POWER = re.compile(r"\^|\*\*")
_INT = re.compile(r"\d+")
_OPERATOR = re.compile(r"[-+*/=<>]|\\(?:cdot|times|div|pm)")
_SCIENTIFIC = re.compile(r"\d[eE][-+]?(\d+)")
_BIG_OPERATOR = re.compile(r"\\(?:[dt]?binom|prod|sum|int)\b")
_FACTORIAL = re.compile(r"(\d+|[)}])\s*!")
_OPERAND = re.compile(r"\s{0,8}(?:([{(])|([\w.\\]{1,100}))")
_CHAINED = re.compile(r"\s{0,8}(?:\^|\*\*)")
_ALL_INT = re.compile(r"[\d{}()\s^*]{1,200}")


def clean_math(ans: str) -> str:
    """What math-verify is given: the answer as written, with only the rewrites math-verify alone
    gets wrong (each has its case in tests/verifiers/test_math_normalisation.py).

    A delimited text that is not one formula ("so $x = 2$.", "\\[\\boxed{3}\\]") is left to
    math-verify's own extraction (see `delimited`); the rewrites below touch a bare formula only.
    """
    # "\f" read by a JSON parser is a form feed: "\frac" arrives as "\x0crac" (seen in MATH-V)
    ans = ans.replace("\x0c", "\\f").strip()
    if len(ans) > MAX_MATH_CHARS:
        return ans  # refused as it is (refuse_math); no scan of a long text
    ans = _THIN_THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace("\\,", ""), ans)  # 32\,349 reads 32+349
    one = _ONE_FORMULA.fullmatch(ans)
    inner = next(g for g in one.groups() if g is not None).strip() if one is not None else ans
    if delimited(inner):
        return ans  # prose with formulas, several formulas, boxes: math-verify's extraction reads it
    ans = _STRAY_DOLLAR.sub("", inner)  # "$1,000.99", "0.3333$": a dollar sign, or a half-written formula
    ans = _AREA_UNIT.sub("", ans)
    return _TRAILING_STOP.sub("", ans).strip()  # "\frac{2}{3}." does not parse


def delimited(text: str) -> bool:
    """True when `text` has its own math delimiters or boxes: math-verify extracts from it as is."""
    return _DELIMITED.search(text) is not None


def _group_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at `start` (len(text) when unclosed)."""
    depth = 0
    for m in _BRACKET.finditer(text, start):
        depth += 1 if m.group() in "{([" else -1
        if depth == 0:
            return m.end()
    return len(text)


def _exponent(text: str, pos: int) -> tuple[str, int]:
    """The operand of a power whose operator ends at `pos`: (its text, where it ends)."""
    m = _OPERAND.match(text, pos)
    if m is None:
        return "", pos
    if m.group(1):
        end = _group_end(text, m.start(1))
        return text[m.start(1) + 1 : end - 1], end
    return m.group(2), m.end()


def _numeric_value(exp: str) -> int | None:
    """The value of an all-integer exponent ("9", "2^{3}", "9^{9}"), None when not all-integer;
    MAX_EXPONENT + 1 as soon as it would exceed MAX_EXPONENT (never computes a big power)."""
    if not _ALL_INT.fullmatch(exp):
        return None
    value = None
    for d in reversed(_INT.findall(exp)):  # right-associative: 2^{3^{2}} = 2^9
        if len(d) > 4:
            return MAX_EXPONENT + 1
        b = int(d)
        if value is not None:
            if b > 1 and (value > 64 or b**value > MAX_EXPONENT):
                return MAX_EXPONENT + 1
            value = b**value
        else:
            value = b
    return value


def _powers(text: str) -> list[tuple[str, int]]:
    """(exponent text, end) of each power operator in `text`."""
    return [_exponent(text, m.end()) for m in _POWER.finditer(text)]


def refuse_math(text: str) -> str | None:
    """Why `text` would keep sympy busy (tower, huge power or factorial, deep nesting), else None."""
    if len(text) > MAX_MATH_CHARS:
        return f"{len(text)} characters is too long to be an answer"
    depth = deepest = 0
    for m in _BRACKET.finditer(text):
        depth = depth + 1 if m.group() in "{([" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        return f"brackets nested {deepest} deep"
    for exp, end in _powers(text):
        if _CHAINED.match(text, end):  # 9^9^9, 9**9**9: towers without braces
            return "a tower of powers"
        value = _numeric_value(exp)
        if value is not None and value > MAX_EXPONENT:
            return f"an exponent over {MAX_EXPONENT}"
        if value is None and any(_POWER.search(inner) for inner, _ in _powers(exp)):
            return "a tower of powers"  # x^{x^{x^{x}}}; e^{x^2} is fine
        if any(len(d) > 4 or int(d) > MAX_EXPONENT for d in _INT.findall(exp)) and value is None:
            return f"an exponent over {MAX_EXPONENT}"
    if _BIG_OPERATOR.search(text) and (_POWER.search(text) or any(len(d) > 3 for d in _INT.findall(text))):
        return "a sum, product or binomial over a huge range"
    if any(len(d) > MAX_DIGITS for d in _INT.findall(text)):
        return f"a number of more than {MAX_DIGITS} digits"
    if any(len(e) > 3 for e in _SCIENTIFIC.findall(text)):
        return "a number out of range (exponent over 999)"
    if len(_OPERATOR.findall(text)) > MAX_OPERATORS:
        return f"more than {MAX_OPERATORS} operators"
    for m in _FACTORIAL.finditer(text):
        arg = m.group(1)
        if (arg.isdigit() and (len(arg) > 4 or int(arg) > MAX_EXPONENT)) or (not arg.isdigit() and _POWER.search(text[: m.end()])):
            return "a huge factorial"
    return None


def check_expr(expr) -> str | None:
    """Why a parsed sympy expression is too big to compare, else None."""
    import sympy

    if not isinstance(expr, sympy.Basic):
        return None
    for n, node in enumerate(sympy.preorder_traversal(expr)):
        if n > MAX_NODES:
            return f"expression of more than {MAX_NODES} nodes"
        if isinstance(node, sympy.Pow) and node.exp.is_Integer and abs(int(node.exp)) > MAX_EXPONENT:
            return f"an exponent over {MAX_EXPONENT}"
        if isinstance(node, sympy.Integer) and node.p.bit_length() > 20_000:
            return "an integer of more than 6,000 digits"
    return None


@contextmanager
def _keep_outer_timer():
    """math-verify's `signal.alarm` replaces the pool's per-item timer; put what was left back."""
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    t0 = time.monotonic()
    try:
        yield
    finally:
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - t0), 1e-3))


def _timeout() -> int | None:
    return TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _parse(text: str) -> list:
    import math_verify.parser
    from math_verify import LatexExtractionConfig, parse

    math_verify.parser.TIMEOUT_WARNING_SHOWN = True  # no warning off the main thread: we know
    with _keep_outer_timer():
        if not delimited(text):
            return parse(f"${text}$", parsing_timeout=_timeout())
        # math-verify's own extraction ("the final answer is 34" in prose wins over a $n$ before
        # it), but only when a formula the writer delimited can be read: when none can
        # ("$ \n 9 \n $"), a number of the prose around it is not taken for the answer
        # (the second parse finds the LaTeX it shares with the first in math-verify's parse cache)
        if not parse(text, [LatexExtractionConfig()], parsing_timeout=_timeout()):
            return []
        return parse(text, parsing_timeout=_timeout())


@lru_cache(maxsize=4096)
def parse_reference(ref: str) -> tuple:
    """A reference parsed once (G completions share it); raises BadReference when unusable."""
    import sympy

    text = clean_math(ref)
    why = refuse_math(text) if text else "empty"
    if why:
        raise BadReference(f"math reference {ref[:60]!r}: {why}")
    gold = _parse(text)
    if not gold:
        raise BadReference(f"math reference {ref[:60]!r} cannot be parsed")
    why = check_expr(gold[0])
    if why or (isinstance(gold[0], sympy.Basic) and gold[0].has(sympy.nan, sympy.zoo)):
        raise BadReference(f"math reference {ref[:60]!r}: {why or 'not a number'}")
    return tuple(gold)


def several_parts(gold: tuple) -> bool:
    """True when a parsed reference is a set of several answers ("1, 2", "x = 1 \\text{ or } x = 2",
    "(2, 2), (6, 2)"): math-verify reads lists, "and" and "or" between values as a set, and a
    set equals only a set with the same elements, so a subset never scores."""
    import sympy

    return bool(gold) and isinstance(gold[0], sympy.FiniteSet) and len(gold[0]) > 1


# Shapes the LaTeX parser meets in answers. Its ANTLR prediction cache starts empty and the first
# parse of each new shape explores the grammar (100-300 ms for "[a, b, c, d]" or "(1, x), (y, 2)");
# parsing these once at worker start fills the cache, so scoring an answer costs milliseconds.
WARMUP = [
    "1/2", "0.5", "-3", "1,234", "3.14e-5", "\\frac{1}{2}", "\\dfrac{3}{4}", "2\\sqrt{3}", "\\sqrt[3]{2}", "x^2+1",
    "e^{x^2}", "2^{10}", "10!", "\\pi", "\\infty", "-\\infty", "45^\\circ", "\\text{abc}", "\\mathrm{m}", "x = 5",
    "(1, 2)", "[1, 2]", "[1, 2, 3, 4]", "(1, 2), (3, 4)", "\\{1, 2\\}", "(0, \\infty)", "[a, b, c, d]", "(x, 0), (1, y)",
    "a, b, c", "1 - 2 - 3 - 4", "1 + 2 + 3", "2 \\cdot 3", "2 \\times 3", "\\log_2 8", "\\ln x", "\\sin x",
    "\\binom{5}{2}", "|x|", "x \\leq 3", "x < 1 \\text{ or } x > 2", "\\begin{pmatrix}1 & 2\\end{pmatrix}",
    "[ab, ab, ab, ab]", "(abc, 0), (1, abc)", "[1e9, 0, 1, 1]", "-1e9 -1e9", "[1.5e9, 1.5e9, 1.5e9]", "5 to 5",
    "1/0 1/0", "[1, 2, x, 4]", "(1,2),(3,4),(5,", "1 2 3", "x y", "\\sqrt{x", "-5 - 5",
    "f(x)", "A", "AB", "x_1", "\\overline{AB}", "\\angle ABC", "1 : 2", "50\\%", "\\$5", "12 to 15", "1 and 2",
    "so $x = 2$ here", "\\boxed{3}", "1 \\text{ and } 2", "x = 1, y = 2",
]


def warm_parser() -> None:
    """Parse the usual answer shapes once (imports sympy, fills the parser's prediction cache)."""
    for text in WARMUP:
        _parse(text)
    math_equal("1/2", "0.5")


def math_equal(pred: str, ref: str) -> tuple[bool, str]:
    """(equivalent?, why not) of an answer and a reference; BadReference for an unusable reference."""
    import math_verify.grader
    from math_verify import verify

    gold = parse_reference(ref)
    text = clean_math(pred)
    why = refuse_math(text)
    if why:
        return False, f"answer refused: {why}"
    t0 = time.monotonic()
    guess = _parse(text)
    if not guess:
        return False, _timed_out(t0, "parsing the answer") or f"{pred[:60]!r} cannot be parsed"
    why = check_expr(guess[0])
    if why:
        return False, f"answer refused: {why}"
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    t0 = time.monotonic()
    with _keep_outer_timer():
        ok = bool(verify(list(gold), guess, timeout_seconds=_timeout()))
    return ok, "" if ok else (_timed_out(t0, "comparing") or f"{pred[:60]!r} is not {ref[:60]!r}")


def _timed_out(t0: float, what: str) -> str | None:
    """A failure reason when math-verify's own time-out (which returns "no" silently) fired.

    math-verify turns its time-out into False / no parse, which would read as a wrong answer; a
    call that took the whole time-out is reported as the verifier's failure instead."""
    if _timeout() is not None and time.monotonic() - t0 >= TIMEOUT_S - 0.05:
        return f"{VERIFIER_FAILED}math-verify timed out after {TIMEOUT_S}s {what}"
    return None
