"""Micro-batches by a token budget: which rows one learner forward takes (`train.micro_batch_tokens`).

A forward's memory grows with the tokens it computes, not with its rows: a micro-batch of 8 rows of
1,000 tokens holds what 500 rows of 16 do. So the rows of a batch are packed into micro-batches
whose computed tokens stay within a budget, counted as the forward pays for them:

- joined forward (prompt + completion per row): n x (P + t), with P the batch's padded prompt
  width (every row's prompt is fed at it) and t the micro-batch's longest completion (the forward
  stops there: `learner.rows_logprobs`);
- each prompt once (`train.prompt_once`, where the model allows it and the micro-batch repeats a
  prompt): U x (P - 1) for the U distinct prompts minus their last token, then n x (1 + t);
- packed (`train.padding_free`): the rows' real tokens only, sum of prompt + completion lengths.

Rows are grouped by length (longest first) so that short completions are not padded to long
ones, like verl's `ppo_max_token_len_per_gpu` with its rearrangement by sequence length; under
`prompt_once` a second packing that keeps each group's rows together (its prompt then runs once)
is tried too, and the one that computes fewer tokens wins. A row that alone exceeds the budget
is a micro-batch of its own (it cannot be split: the budget is then exceeded by that forward).
Which micro-batch a row lands in never changes the gradient: every loss divides by the whole
mini-batch's token (or sequence) count (`learner._denominator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class RowLengths:
    """What a forward over some rows of a batch pays for, per row (N rows)."""

    completion: tuple[int, ...]  # valid completion tokens; the forward runs to the longest (at least 1)
    prompt: tuple[int, ...]  # valid prompt tokens (the rest of `width` is left padding)
    group: tuple[int, ...]  # which prompt the row repeats (rows of a group share one)
    width: int  # P: the padded prompt width every row is fed at
    shared: bool  # a micro-batch that repeats a prompt runs that prompt once (`train.prompt_once`)
    packed: bool = False  # the forward runs the rows' real tokens as one sequence (`train.padding_free`)


def row_lengths(prompt_inputs: dict, completion_mask: torch.Tensor, shared: bool, packed: bool = False) -> RowLengths:
    """The lengths of a batch's rows: prompt_inputs (N, P) left padded (with `_row_prompt` when rows
    repeat prompts), completion_mask (N, T); `packed`: forwards of real tokens only."""
    n = completion_mask.shape[0]
    attn = prompt_inputs["attention_mask"]
    group = prompt_inputs.get("_row_prompt", range(n))
    return RowLengths(tuple(int(x) for x in completion_mask.sum(1).tolist()), tuple(int(x) for x in attn.sum(1).tolist()),
                      tuple(int(g) for g in group), int(attn.shape[1]), bool(shared and "_row_prompt" in prompt_inputs and not packed),
                      bool(packed))


def _cost(lengths: RowLengths, n: int, groups: int, longest: int) -> int:
    """Computed tokens of a forward over n rows of `groups` distinct prompts, padded to `longest`."""
    t = max(1, longest)
    if lengths.shared and groups < n:
        return groups * (lengths.width - 1) + n * (1 + t)
    return n * (lengths.width + t)


def forward_tokens(lengths: RowLengths, rows: Sequence[int]) -> tuple[int, int]:
    """(computed, valid) tokens of one forward over `rows`: computed as the forward pays for them
    (padding included), valid those that are no padding."""
    if not rows:
        return 0, 0
    if lengths.packed:
        real = sum(lengths.prompt[r] + lengths.completion[r] for r in rows)
        return real, real
    groups = {lengths.group[r] for r in rows}
    computed = _cost(lengths, len(rows), len(groups), max(lengths.completion[r] for r in rows))
    completions = sum(lengths.completion[r] for r in rows)
    if lengths.shared and len(groups) < len(rows):  # each distinct prompt's head once, its last token per row
        first = {}
        for r in rows:
            first.setdefault(lengths.group[r], r)
        return computed, sum(lengths.prompt[r] - 1 for r in first.values()) + len(rows) + completions
    return computed, sum(lengths.prompt[r] for r in rows) + completions


def _pack(lengths: RowLengths, order: Sequence[int], budget: int) -> list[list[int]]:
    """Rows in `order` -> consecutive micro-batches, each closed when the next row would exceed the budget."""
    out: list[list[int]] = []
    rows: list[int] = []
    groups: set[int] = set()
    longest = 0
    for r in order:
        g, c = lengths.group[r], lengths.completion[r]
        cost = forward_tokens(lengths, rows + [r])[0] if lengths.packed else \
            _cost(lengths, len(rows) + 1, len(groups | {g}), max(longest, c))
        if rows and cost > budget:
            out.append(sorted(rows))
            rows, groups, longest = [], set(), 0
        rows.append(r)
        groups.add(g)
        longest = max(longest, c)
    if rows:
        out.append(sorted(rows))
    return out


def by_length(lengths: RowLengths, rows: Sequence[int]) -> list[int]:
    """Longest completion first (a group's rows of one length side by side)."""
    return sorted(rows, key=lambda r: (-lengths.completion[r], lengths.group[r], r))


def by_group(lengths: RowLengths, rows: Sequence[int]) -> list[int]:
    """Whole groups, the group with the longest completion first, each group's rows longest first."""
    longest: dict[int, int] = {}
    for r in rows:
        longest[lengths.group[r]] = max(longest.get(lengths.group[r], 0), lengths.completion[r])
    return sorted(rows, key=lambda r: (-longest[lengths.group[r]], lengths.group[r], -lengths.completion[r], r))


def pack_rows(lengths: RowLengths, rows: Sequence[int], budget: int) -> list[list[int]]:
    """`rows` -> micro-batches (each sorted) of at most `budget` computed tokens (`forward_tokens`);
    a row above the budget on its own is a micro-batch alone. The packing by length, or under a
    shared prompt the one by group where it computes fewer tokens (then fewer micro-batches)."""
    if not rows:
        return []
    plans = [_pack(lengths, by_length(lengths, rows), budget)]
    if lengths.shared:
        plans.append(_pack(lengths, by_group(lengths, rows), budget))
    return min(plans, key=lambda p: (sum(forward_tokens(lengths, mb)[0] for mb in p), len(p)))


def split_evenly(rows: Sequence[int], parts: int) -> list[list[int]]:
    """Without a budget: `parts` micro-batches dealt round-robin (each sorted; empty ones dropped)."""
    return [sorted(m) for m in (list(rows)[i::parts] for i in range(parts)) if m]


def consecutive(n: int, size: int) -> list[list[int]]:
    """Rows 0..n-1 in consecutive chunks of `size` (the no-grad forwards without a budget)."""
    return [list(range(s, min(n, s + size))) for s in range(0, n, max(1, size))]
