"""Math-Verify's own cases as a model would write them, scored by our verifiers (shared by the test and by
anyone measuring agreement: `python -m tests.verifiers.peers.cases`)."""

from __future__ import annotations

import json
from pathlib import Path

from mmrlvr.types import Sample
from mmrlvr.verifiers.base import resolve_verifier, safe_verify

CASES = Path(__file__).resolve().parent / "math_verify_cases.json"


def load_cases() -> list[dict]:
    return json.loads(CASES.read_text())["cases"]


def completion(pred: str) -> str:
    """A boxed prediction is written as is; a bare one inside `<answer>...</answer>`."""
    return pred if "\\boxed" in pred else f"<answer>{pred}</answer>"


def our_score(case: dict):
    """Our verdict on one case (`choice` for option-letter cases, else `math`)."""
    sample = Sample(id=case["id"], messages=(), reference=case["gold"], verifier=case["kind"])
    return safe_verify(resolve_verifier(case["kind"]), completion(case["pred"]), sample)


def is_default(case: dict) -> bool:
    """The peer compared with its default settings (precision 6, strict, no set-relation option)."""
    s = case["settings"]
    return s["call"] == "parse_verify" or (
        s["call"] == "compare_strings" and s["match_types"] == ["latex", "expr"] and s["precision"] == 6
        and s["strict"] and not s["allow_set_relation_comp"])


def measure() -> dict:
    """{id: (expected, our score, reason)} over every case."""
    out = {}
    for c in load_cases():
        v = our_score(c)
        out[c["id"]] = (c["expected"], int(v.score == 1.0), v.reason)
    return out


if __name__ == "__main__":
    import sys

    res = measure()
    cases = {c["id"]: c for c in load_cases()}
    fp = [k for k, (e, s, _) in res.items() if s and not e]
    fn = [k for k, (e, s, _) in res.items() if e and not s]
    agree = len(res) - len(fp) - len(fn)
    d = [k for k in res if is_default(cases[k])]
    d_agree = sum(res[k][0] == res[k][1] for k in d)
    print(f"agree {agree}/{len(res)}  false positives {len(fp)}  false negatives {len(fn)}  default settings {d_agree}/{len(d)}")
    if "-v" in sys.argv:
        for k in fp + fn:
            c = cases[k]
            print(("FP " if k in fp else "FN ") + k, repr(c["gold"])[:80], "|", repr(c["pred"])[:100], "|", res[k][2][:100])
