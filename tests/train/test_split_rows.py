"""One splitter for every learner forward (`mmrlvr.train.forward_rows.split_rows`): None is the one
"no budget" value, a budget packs by what the forward computes, and `[]` is the one empty pass."""

from __future__ import annotations

import pytest

from mmrlvr.train.forward_rows import in_step, split_rows
from mmrlvr.train.micro_batches import RowLengths, consecutive, split_evenly


def _never():
    raise AssertionError("lengths are read only with a budget")


def test_no_budget_is_none_and_splits_by_count_without_reading_lengths():
    assert split_rows(range(5), None, _never, lambda rows: split_evenly(rows, 2)) == [[0, 2, 4], [1, 3]]
    assert split_rows(range(5), None, _never, lambda rows: consecutive(len(rows), 2)) == [[0, 1], [2, 3], [4]]


def test_a_budget_packs_longest_first_by_computed_tokens():
    # width 2; completions 3, 1, 2: row 0 costs 2 + 3 = 5, rows 0 and 2 together 2 x (2 + 3) = 10, a
    # third row 3 x 5 = 15 > 10, so row 1 runs alone (2 + 1 = 3)
    lengths = RowLengths((3, 1, 2), (2, 2, 2), (0, 1, 2), 2, False)
    assert split_rows(range(3), 10, lambda: lengths, lambda rows: pytest.fail("no count split with a budget")) == [
        [0, 2], [1]]


def test_empty_passes_are_empty_lists_up_to_the_count():
    assert in_step([[0, 2], [1]], 4) == [[0, 2], [1], [], []]
    assert in_step([[0]], 1) == [[0]]

