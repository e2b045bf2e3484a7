"""How the learner's forwards over a batch read it, and which rows each one runs.

`LogprobOptions` is what those forwards take instead of the whole config (the sampler's temperature
and suppressed ids, the forward's memory options, the token budget). `split_rows` is the one way
the token budget reaches `micro_batches`' packing: every forward (the update's micro-batches, the
old and reference log-probs, the token signals) asks it which rows each pass runs, and `in_step`
pads a rank's passes with the one empty pass, `[]`, so that collectives stay in step.
`forward_rows` is that for the no-grad forwards over a real batch and model (how the model's
forward pays for the prompt)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from mmrlvr.models.patches.options import PLAIN, ForwardOptions
from mmrlvr.models.wrapping import base_model
from mmrlvr.rollout.prefill import why_not_shared
from mmrlvr.train.distributed import all_max, rank_world
from mmrlvr.train.micro_batches import RowLengths, consecutive, forward_tokens, pack_rows, row_lengths
from mmrlvr.types import RolloutBatch


@dataclass(frozen=True)
class LogprobOptions:
    """What a forward over a batch's completions reads: log-probs under the distribution the
    sampler drew from (its temperature, the ids it never samples), the forward's memory options,
    and at most `micro_batch_tokens` tokens per forward (None: rows by count)."""

    temperature: float = 1.0
    suppress_ids: tuple[int, ...] = ()
    forward: ForwardOptions = PLAIN
    micro_batch_tokens: int | None = None

    @classmethod
    def of(cls, cfg, suppress_ids=()) -> "LogprobOptions":
        """From the resolved config (`rollout.temperature`, `train.*`) and the engine's suppressed ids."""
        return cls(float(cfg.rollout.temperature), tuple(int(i) for i in suppress_ids), ForwardOptions.of(cfg.train),
                   cfg.train.micro_batch_tokens)


def shares_prompts(model, batch: RolloutBatch, opts: LogprobOptions) -> bool:
    """Whether `model`'s forward over rows that repeat a prompt runs that prompt once
    (`train.prompt_once` where `why_not_shared` allows it, never packed): how the token budget counts prompts."""
    inputs = batch.prompt_inputs
    if opts.forward.padding_free or not opts.forward.prompt_once or "_base" not in inputs:
        return False
    return why_not_shared(base_model(model), inputs, True, list(opts.suppress_ids)) is None


def batch_lengths(model, batch: RolloutBatch, opts: LogprobOptions) -> RowLengths:
    """The rows' lengths as a forward of `model` pays for them (`micro_batches.forward_tokens`)."""
    return row_lengths(batch.prompt_inputs, batch.completion_mask, shares_prompts(model, batch, opts),
                       opts.forward.padding_free)


def cheapest_row(lengths: RowLengths, rows) -> int:
    """The row of `rows` with the shortest completion: what a zero-weight pass runs."""
    return min(rows, key=lambda r: (lengths.completion[r], r))


_over_budget_warned: set[int] = set()


def warn_over_budget(lengths: RowLengths, micros: list, budget: int) -> None:
    """Say once per budget that a row alone computes more than `train.micro_batch_tokens` (it then
    runs as a micro-batch of its own, above the budget: a row cannot be split)."""
    over = [forward_tokens(lengths, mb)[0] for mb in micros if mb and len(mb) == 1]
    worst = max((t for t in over if t > budget), default=0)
    if worst and budget not in _over_budget_warned:
        _over_budget_warned.add(budget)
        logging.getLogger(__name__).warning(
            "train.micro_batch_tokens=%d: a row of %d tokens (prompt width %d + completion) runs alone, above "
            "the budget; raise the budget or lower rollout.max_new_tokens / model.max_pixels", budget, worst, lengths.width)


def split_rows(rows: Sequence[int], budget: int | None, lengths: Callable[[], RowLengths],
               by_count: Callable[[Sequence[int]], list[list[int]]]) -> list[list[int]]:
    """The rows of each forward over `rows`: the one splitter every learner forward uses.

    `budget` is `train.micro_batch_tokens`, and None is the one value that means "no budget": then
    `by_count(rows)` splits them by count (the update: `algo.grad_accum` shares dealt round-robin;
    the no-grad forwards: consecutive rows). With a budget, rows are packed within it
    (`micro_batches.pack_rows`, the costs from `lengths()`, read only then), and a row that alone
    computes more is reported once. No pass is empty here: `in_step` adds those."""
    if budget is None:
        return by_count(rows)
    costs = lengths()
    passes = pack_rows(costs, rows, budget)
    warn_over_budget(costs, passes, budget)
    return passes


def in_step(passes: list[list[int]], count: int) -> list[list[int]]:
    """`passes` padded to `count` with empty passes, `[]` (the one way to write one): a rank with no
    rows left runs its cheapest row at zero weight, so every rank makes as many forwards (DDP's and
    sharded weights' collectives stay in step)."""
    return passes + [[] for _ in range(count - len(passes))]


def forward_rows(model, batch: RolloutBatch, opts: LogprobOptions, micro: int | None = None) -> list[list[int]]:
    """Rows of each no-grad forward over the whole batch (`split_rows`): `micro` consecutive rows at
    a time (default all), or packed by `train.micro_batch_tokens`. With a budget and several
    processes, padded (`in_step`) to the longest rank's count (a forward whose result nobody reads)."""
    n = batch.completion_ids.shape[0]
    budget = opts.micro_batch_tokens
    chunks = split_rows(range(n), budget, lambda: batch_lengths(model, batch, opts),
                        lambda rows: consecutive(len(rows), micro or n))
    if budget is not None and rank_world()[1] > 1:
        chunks = in_step(chunks, int(all_max(len(chunks))))
    return chunks
