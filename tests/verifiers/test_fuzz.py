"""A seeded fuzz run through every built-in verifier, in this process.

About 2,900 items (`mmrlvr.verifiers.fuzz`: control characters, 1 MB strings, unclosed and nested
tags, digit runs, huge and non-finite numbers, sympy towers, malformed boxes and JSON, bad
references, random mixes). Each item must finish under a per-item guard (an alarm, far above the
~50 ms the benchmark measures: it catches a super-linear pattern, it does not time anything), never
raise, stay in [0, 1], and serialise as strict JSON; a reference holding a non-finite number must
give no reward.
"""

import json
import re
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmrlvr.verifiers.base import resolve_verifier
from mmrlvr.verifiers.extract import tag_contents
from mmrlvr.verifiers.fuzz import GOOD, fuzz_cases, nonfinite_reference
from mmrlvr.verifiers.pool import VerifierTimeout, _run_chunk

GUARD_S = 5.0  # per item; the slowest item in the benchmark takes a few tens of milliseconds


@pytest.mark.slow
def test_fuzz_every_verifier_is_total_bounded_and_strict():
    cases = list(fuzz_cases(seed=0, per_family=40))
    assert len(cases) >= 2500 and {c.verifier for c in cases} == set(GOOD)
    for name in GOOD:  # imports outside the guard, as the pool does
        warm = getattr(resolve_verifier(name), "warmup", None)
        if warm:
            warm()
    # the pool's own worker loop, run here: each item under its own alarm of GUARD_S
    verdicts = []
    for name in GOOD:
        mine = [c for c in cases if c.verifier == name]
        verdicts += list(zip(mine, _run_chunk(name, [(c.completion, c.sample) for c in mine], GUARD_S)))
    for case, v in verdicts:
        assert "timed out" not in v.reason, case.describe()
        assert not v.reason.startswith("verifier raised"), (case.describe(), v.reason)
        assert 0.0 <= v.score <= 1.0, case.describe()
        json.dumps({"score": v.score, "reason": v.reason, "parts": v.parts}, allow_nan=False)
        if case.family == "bad_reference" and nonfinite_reference(case):
            assert v.score == 0.0, (case.describe(), v.reason)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def test_the_guard_catches_a_slow_verifier(tmp_path, monkeypatch):
    """The per-item guard is real: a verifier that spins is stopped and reported, not waited for."""
    plugin = tmp_path / "slow_verifier.py"
    plugin.write_text("def spin(completion, sample):\n    while True:\n        pass\n")
    (v,) = _run_chunk(f"{plugin}:spin", [("x", None)], 0.2)
    assert v.score == 0.0 and "timed out" in v.reason
    assert VerifierTimeout.__mro__[1] is BaseException  # a verifier's `except Exception` cannot swallow it


LAZY = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<answer>", "</answer>", "<ANSWER>", "</Answer>", "a", " ", "<", ">", "/"]), max_size=30))
def test_tag_contents_pairs_tags_like_the_lazy_regex(parts):
    """The linear scan returns exactly what `<answer>(.*?)</answer>` found (which was quadratic)."""
    text = "".join(parts)
    assert tag_contents(text) == LAZY.findall(text)


@pytest.mark.parametrize("n", [1_000, 100_000])
def test_unclosed_tags_and_digit_runs_are_linear_not_quadratic(n):
    """Counted work, not time: the scan visits each tag once, whatever the input."""
    assert tag_contents("<answer>" * n + "x") == []
    assert tag_contents(("<answer>1</answer>") * n) == ["1"] * n
