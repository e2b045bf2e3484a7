"""Packing rows into micro-batches by a token budget (`mmrlvr.train.micro_batches`), on hand-made
lengths whose costs are worked out in the comments."""

from __future__ import annotations

import pytest

from mmrlvr.train.micro_batches import RowLengths, by_group, by_length, forward_tokens, pack_rows, split_evenly


def lengths(completion, prompt=None, group=None, width=10, shared=False) -> RowLengths:
    n = len(completion)
    return RowLengths(tuple(completion), tuple(prompt or [width] * n), tuple(group or range(n)), width, shared)


def test_forward_tokens_count_what_the_forward_computes():
    # P = 10; rows 0, 1 repeat prompt 0 (8 real tokens), rows 2, 3 prompt 1 (10)
    ln = lengths([5, 2, 7, 0], prompt=[8, 8, 10, 10], group=[0, 0, 1, 1])
    # joined rows: 2 x (10 + 5) computed; 8 + 8 prompt + 5 + 2 completion tokens real
    assert forward_tokens(ln, [0, 1]) == (30, 23)
    # a completion of 0 tokens still runs one position: 1 x (10 + 1)
    assert forward_tokens(ln, [3]) == (11, 10)
    shared = lengths([5, 2, 7, 0], prompt=[8, 8, 10, 10], group=[0, 0, 1, 1], shared=True)
    # prompt 0 once minus its last token (9), then 2 x (last token + 5): 21; real: 7 + 2 + 5 + 2
    assert forward_tokens(shared, [0, 1]) == (21, 16)
    # no prompt repeated: the joined forward, 2 x (10 + 7)
    assert forward_tokens(shared, [0, 2]) == (34, 30)
    # 2 prompts once (2 x 9) + 4 x (1 + 7) = 50; real: 7 + 9 + 4 + 14
    assert forward_tokens(shared, [0, 1, 2, 3]) == (50, 34)
    assert forward_tokens(shared, []) == (0, 0)


def test_rows_are_packed_longest_first_within_the_budget():
    ln = lengths([1, 9, 2, 8, 3, 7, 1, 9], width=4)
    # longest first: rows 1, 7 (9), 3 (8), 5 (7), 4 (3), 2 (2), 0, 6 (1); budget 30:
    # [1, 7] = 2 x 13 = 26 (a third row: 39); [3, 5] = 2 x 12 = 24 (a third: 36); the four short
    # rows 4 x (4 + 3) = 28
    assert by_length(ln, range(8)) == [1, 7, 3, 5, 4, 2, 0, 6]
    assert pack_rows(ln, range(8), 30) == [[1, 7], [3, 5], [0, 2, 4, 6]]
    assert [forward_tokens(ln, mb)[0] for mb in pack_rows(ln, range(8), 30)] == [26, 24, 28]
    # the same rows in equal round-robin shares (algo.grad_accum=3) pad every short row to 9
    assert split_evenly(range(8), 3) == [[0, 3, 6], [1, 4, 7], [2, 5]]
    assert sum(forward_tokens(ln, mb)[0] for mb in split_evenly(range(8), 3)) == 3 * 12 + 3 * 13 + 2 * 11 > 78
    # only some rows (the mini-batch's, those with signal), in any order
    assert pack_rows(ln, [6, 3, 0], 1000) == [[0, 3, 6]]
    assert pack_rows(ln, [], 30) == []


def test_a_row_above_the_budget_is_a_micro_batch_of_its_own():
    ln = lengths([1, 9, 2, 8, 3, 7, 1, 9], width=4)
    # rows of 9 cost 13 > 10, 8 costs 12, 7 costs 11: alone; 3 and 2 (2 x 7 = 14 > 10), 2 and 1
    # (2 x 6 = 12): alone; the two rows of 1 fit together (2 x 5 = 10)
    assert pack_rows(ln, range(8), 10) == [[1], [7], [3], [5], [4], [2], [0, 6]]


def test_shared_prompts_keep_groups_together_when_that_computes_less():
    # two groups of 4 rows with a 100-token prompt: mixing them runs both prompts
    ln = lengths([10, 2, 10, 2, 9, 3, 9, 3], width=100, group=[0, 0, 0, 0, 1, 1, 1, 1], shared=True)
    # by length: [0, 2] (99 + 2 x 11 = 121, adding row 4 of group 1: 2 x 99 + 3 x 11 = 231 > 200),
    # [4, 5, 6, 7] (99 + 4 x 10 = 139), [1, 3] (99 + 2 x 3 = 105): 365 tokens in 3 forwards
    assert by_length(ln, range(8)) == [0, 2, 4, 6, 5, 7, 1, 3]
    # by group: [0, 1, 2, 3] (99 + 4 x 11 = 143) and [4, 5, 6, 7] (139): 282 tokens in 2
    assert by_group(ln, range(8)) == [0, 2, 1, 3, 4, 6, 5, 7]
    assert pack_rows(ln, range(8), 200) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # without sharing the prompts are paid per row: by length only, 200 // 110 = 1 row per forward
    joined = lengths([10, 2, 10, 2, 9, 3, 9, 3], width=100, group=[0, 0, 0, 0, 1, 1, 1, 1])
    assert len(pack_rows(joined, range(8), 200)) == 8


@pytest.mark.parametrize("budget", [12, 30, 64, 500])
def test_every_micro_batch_fits_and_every_row_is_in_one(budget):
    ln = lengths([(7 * i) % 11 for i in range(20)], prompt=[3 + i % 4 for i in range(20)],
                 group=[i // 4 for i in range(20)], width=6, shared=True)
    plan = pack_rows(ln, range(20), budget)
    assert sorted(r for mb in plan for r in mb) == list(range(20))
    assert all(forward_tokens(ln, mb)[0] <= budget or len(mb) == 1 for mb in plan)
