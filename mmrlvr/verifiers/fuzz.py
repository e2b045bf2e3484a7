"""Seeded adversarial completions and references for checking that a verifier is total and fast.

`fuzz_cases(seed, per_family)` yields `FuzzCase`s in families that have broken verifiers before:
control characters, 1 MB strings, unclosed and nested tags, digit and whitespace runs, huge and
non-finite numbers, sympy towers, malformed boxes and JSON, bad references, and random mixes of
risky fragments. Used by the suite (`tests/verifiers/test_fuzz.py`) and the benchmark
(`benchmarks/correctness/fuzz_verifiers.py`); plug-in authors can run their own verifier over it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Iterator

from mmrlvr.types import Sample

MB = 1 << 20
GOOD = {  # a well-formed reference and a correct answer per built-in verifier
    "count": (3, "3"), "math": ("\\frac{1}{2}", "0.5"), "choice": ("B", "B"), "number": (12.5, "12.5"),
    "iou": ([10, 10, 50, 50], "[10, 10, 50, 50]"), "boxes": ([[10, 10, 50, 50], [60, 60, 90, 90]], "[[10,10,50,50],[60,60,90,90]]"),
    "order": (["C", "A", "B"], "C, A, B"), "tiou": ([2.5, 7.0], "[2.5, 7.0]"), "format": (None, "3"),
}
META = {"image_size": [100, 100]}
CONTROL = "".join(map(chr, range(32))) + "\x7f\x85\u2028\u2029\u200b\u200e\u202e\ufeff\ufffd\ud7ff"
FRAGMENTS = ["<answer>", "</answer>", "<think>", "</think>", "<ANSWER>", "\\boxed{", "{", "}", "[", "]", "(", ")",
             ",", " ", "\n", "-", "->", " to ", "e", "E", ".", "9" * 40, "nan", "inf", "-inf", "1e309", "^{", "**",
             "\\frac{", "\\sqrt{", "!", "%", '"', ":", "bbox_2d", "<|box_start|>", "<|box_end|>", "answer is",
             "seconds", "then", "A", "B", "x =", "\\circ", "$", "0"]


@dataclass(frozen=True)
class FuzzCase:
    family: str
    verifier: str
    completion: str
    sample: Sample

    def describe(self) -> str:
        head = self.completion[:60].encode("unicode_escape").decode()
        return f"{self.family}/{self.verifier}: {len(self.completion)} chars {head!r}..., reference {str(self.sample.reference)[:40]!r}"


def _wrap(rng: random.Random, body: str) -> str:
    return rng.choice([body, f"<answer>{body}</answer>", f"<think>x</think><answer>{body}</answer>", f"\\boxed{{{body}}}",
                       f"so the answer is {body}"])


def _control(rng, good):
    chars = list(good)
    for _ in range(rng.randint(1, 40)):
        chars.insert(rng.randint(0, len(chars)), rng.choice(CONTROL))
    return _wrap(rng, "".join(chars))


def _huge(rng, good):
    return rng.choice([
        "a" * MB, "9" * MB, " " * MB + good, "<answer>" + "x" * MB, f"<answer>{'1' * MB}</answer>",
        good + "\x00" * MB, "<think>" + "y" * MB + "</think><answer>" + good + "</answer>", ("[" + good) * (MB // 40),
    ])


def _tags(rng, good):
    n = rng.choice([10, 1000, 10_000])
    return rng.choice([
        "<answer>" * n + good, "</answer>" * n, "<answer>" * n + good + "</answer>" * n, "<think>" * n + good,
        "<answer><think>" * n, "<ANSWER>" + good + "</answer>", "<answer>" + good, good + "</answer>" * 3,
        "\\boxed{" * n + good, "\\boxed{\\boxed{" * (n // 2) + good + "}}" * (n // 2), "<answer>" + "\\boxed{1}\\boxed{2}" * n + "</answer>",
        ("<answer>" + good + "</answer>") * n, "answer is " * n, "answer: " + " " * n + ".",
    ])


def _digits(rng, good):
    n = rng.choice([100, 500, 1000, 5000, 20_000])
    d = "".join(rng.choice("0123456789") for _ in range(n)) if rng.random() < 0.5 else "1" * n
    return _wrap(rng, rng.choice([
        d, "[" + d, "(" + d, d + "." + d, ",".join(d[:n // 4]), "-".join(d[:n // 4]), ".".join(d[:n // 4]), d + " to " + d,
        "[" + ",".join(d[: n // 4]) + "]", " ".join(d[:n // 4]), d + " " * n + d, "1" + " " * n + "-" + " " * n + "2",
        "1e" + d, "0." + d + "e-" + d[:6],
    ]))


def _numbers(rng, good):
    x = rng.choice(["1e999999", "-1e999999", "nan", "NaN", "inf", "-inf", "Infinity", "1e-400", "9" * 400, "0x1p1024",
                    "1,000,000,000,000,000,000,000", "−5", "1/0", "0/0", "1e308*10", "1.7976931348623157e309"])
    return _wrap(rng, rng.choice([x, f"[{x}, {x}, {x}, {x}]", f"[{x}, 1]", f"({x}, 0), (1, {x})", f"{x} to {x}", x + " " + x]))


def _math(rng, good):
    deep = rng.choice([20, 60, 300])
    return _wrap(rng, rng.choice([
        "9^{9^{9}}", "2^{2^{2^{2^{2^{2}}}}}", "x 9**9**9", "9**9**9**9", "10^{10^{10}}", "(x+1)^{100000}", "2^{999999999}",
        "\\frac{1}{" * deep + "2" + "}" * deep, "\\sqrt{" * deep + "2" + "}" * deep, "(" * deep + "1" + ")" * deep,
        "1000000!", "(10^{10})!", "\\binom{10^{9}}{10^{8}}", "x^{x^{x^{x}}}", "e^{e^{e^{e^{10}}}}", "9^9^9", "10**10**10",
        "\\int_0^{10^{10}} x^{10^{10}} dx", "\\prod_{k=1}^{10^{9}} k", "\\sum_{n=1}^{10^{12}} n^{n}",
        "+".join(["x"] * 300), "*".join(["(x+1)"] * 100), "1" + "^1" * 200, "10^{10^{-10^{10}}}",
    ]))


def _boxes(rng, good):
    n = rng.choice([3, 100, 10_000])
    return _wrap(rng, rng.choice([
        "[1, 2, 3]", "[1, 2, 3, 4, 5]", "[" * n, "[" * n + "]" * n, '{"bbox_2d": [' * n, "[1,2,3,4" * n, "(1,2),(3," * n,
        "[1,2,3,4]" * n, json.dumps([[1, 2, 3, 4]] * n), '[{"bbox_2d": [1, 2, "x", 4]}]', "[NaN, NaN, Infinity, 1]",
        "[1e999, 0, 1, 1]", "[50, 50, 10, 10]", "[0, 0, 0, 0]", "[-1e300, -1e300, 1e300, 1e300]", '{"bbox": {"bbox": 1}}',
        "<|box_start|>(1,2),(3,4)<|box_end|>" * n, '{"a": ' * n + "1" + "}" * n, "```json\n[1, 2, 3, 4]\n```" * n,
        "[true, false, null, 1]", '["1", "2", "3", "4"]',
    ]))


def _random(rng, good):
    return "".join(rng.choice(FRAGMENTS) if rng.random() < 0.8 else rng.choice(CONTROL) for _ in range(rng.randint(1, 120)))


BAD_REFERENCES = [float("nan"), float("inf"), -float("inf"), None, "", "nan", "inf", [], [float("nan")] * 2,
                  [float("nan")] * 4, [1, 2], ["a", "b", "c", "d"], [[float("inf"), 0, 1, 1]], {"x": 1}, "x" * 5000,
                  [5.0, 2.0], [10, 10, 5, 5], True, ["A", "A"], "\\frac{", "9^{9^{9}}", "BB"]


def _bad_reference(rng, verifier, good_ref):
    """A valid answer against an unusable reference or meta: must score 0, never raise."""
    meta = dict(META)
    roll = rng.random()
    if roll < 0.2:
        meta = rng.choice([{"rel_tol": float("inf")}, {"rel_tol": float("nan")}, {"rel_tol": -1}, {"image_size": [0, 0]},
                           {"image_size": [float("nan"), 5]}, {"box_format": "weird"}, {"threshold": float("nan")},
                           {"options": "not a list"}, {"metric": 7}, {"iou_threshold": float("inf")}])
        return good_ref, meta
    return rng.choice(BAD_REFERENCES), meta


READS_META = {"number": ("rel_tol",), "iou": ("image_size", "threshold"), "boxes": ("image_size", "iou_threshold")}


def has_nonfinite(x) -> bool:
    """True when `x` (a reference, or nested lists/dicts of them) holds NaN or an infinity."""
    if isinstance(x, float):
        return x != x or x in (float("inf"), -float("inf"))
    if isinstance(x, str):
        return x.strip().lower() in ("nan", "inf", "-inf", "infinity")
    if isinstance(x, dict):
        return any(has_nonfinite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(has_nonfinite(v) for v in x)
    return False


def nonfinite_reference(case: FuzzCase) -> bool:
    """The case's reference, or a meta field its verifier reads, is non-finite: it must score 0."""
    meta = [case.sample.meta.get(k) for k in READS_META.get(case.verifier, ())]
    return has_nonfinite(case.sample.reference) or has_nonfinite(meta)


FAMILIES = {"control": _control, "huge": _huge, "tags": _tags, "digits": _digits, "numbers": _numbers, "math": _math,
            "boxes": _boxes, "random": _random}


def fuzz_cases(seed: int = 0, per_family: int = 20, verifiers=tuple(GOOD), huge_per_verifier: int = 3) -> Iterator[FuzzCase]:
    """`per_family` cases per (family, verifier), plus as many bad-reference cases; 1 MB strings are
    capped at `huge_per_verifier` per verifier (they test size, not variety)."""
    rng = random.Random(seed)
    for verifier in verifiers:
        ref, good = GOOD[verifier]
        for family, make in FAMILIES.items():
            n = min(per_family, huge_per_verifier) if family == "huge" else per_family
            for i in range(n):
                yield FuzzCase(family, verifier, make(rng, good), Sample(f"{family}-{i}", (), ref, verifier, meta=dict(META)))
        for i in range(per_family):
            bad_ref, meta = _bad_reference(rng, verifier, ref)
            completion = rng.choice([_wrap(rng, good), good, _random(rng, good)])
            yield FuzzCase("bad_reference", verifier, completion, Sample(f"badref-{i}", (), bad_ref, verifier, meta=meta))
