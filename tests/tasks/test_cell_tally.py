"""cell_tally: a written row-by-row chain before the count, and a teacher that misreads the bottom row."""

import random

import pytest

from mmrlvr.tasks import load_task
from mmrlvr.tasks.cell_tally import chain
from mmrlvr.verifiers import resolve_verifier, safe_verify

# 4 x 4 board, cells numbered row-major: 0 (row 1), 5 (row 2), 13 and 15 (row 4)
SHAPES = ((0, "red", "circle"), (5, "blue", "square"), (13, "red", "triangle"), (15, "green", "circle"))


def test_chain_lists_rows_and_counts_what_it_listed():
    text, n = chain(SHAPES, 4, "red", random.Random(0))
    assert n == 2 and text.startswith("<think>") and text.endswith("</think> <answer>2</answer>")
    for part in ("1: red", "2: blue", "3: nothing", "4: red, green"):
        row, items = part.split(": ")
        assert any(f"{w} {row}{sep}{items}" in text for w in ("Row", "row") for sep in (": ", " I see ", " has "))
    assert "1, 2." in text  # the tally
    # the flawed teacher reads the bottom row's red as the next colour (blue) and counts 1
    flawed, m = chain(SHAPES, 4, "red", random.Random(0), misread_last_row=True)
    assert m == 1 and flawed.endswith("<answer>1</answer>") and "blue, green" in flawed
    # a misread of the bottom row changes nothing when it holds no target shape
    assert chain(SHAPES, 4, "blue", random.Random(0), misread_last_row=True)[1] == 1


def test_build_references_teacher_flaw_and_held_out_boards():
    train = load_task("cell_tally", "train", 400, 0, flaw_prob=0.7)
    evals = load_task("cell_tally", "eval", 64, 0)
    count = resolve_verifier("count")
    scores = [safe_verify(count, s.target, s).score for s in train]
    # a flaw is visible only when the bottom row holds a target shape (~40% of boards) -> 0.7 * 0.4
    assert 0.15 < 1 - sum(scores) / len(scores) < 0.4
    assert all(s.reference == s.meta["colors"].count(s.meta["target"]) for s in train)
    assert all(safe_verify(count, s.target, s).score == 1.0 for s in load_task("cell_tally", "train", 100, 1, flaw_prob=0.0))
    assert not {s.images[0].tobytes() for s in train} & {s.images[0].tobytes() for s in evals}
    with pytest.raises(ValueError, match="cell_tally: need"):
        load_task("cell_tally", "train", 4, 0, flaw_prob=1.5)
