"""benchmarks/correctness/mutation.py stays runnable as the code moves: every mutant's text is found
exactly once in its file (the script refuses to run otherwise), and its tests exist."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "benchmarks/correctness/mutation.py")
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)
ALL = [*mutation.MUTANTS, *mutation.NEW_MUTANTS]


@pytest.mark.parametrize("name,rel,old,new,tests", ALL, ids=[m[0][:50] for m in ALL])
def test_each_mutant_changes_one_place_of_the_current_code(name, rel, old, new, tests):
    text = (ROOT / rel).read_text()
    assert text.count(old) == 1, f"{name!r}: {old!r} occurs {text.count(old)} times in {rel}"
    assert old != new
    for t in tests:
        assert (ROOT / t.split("::")[0]).exists(), f"{name!r}: no test {t}"
