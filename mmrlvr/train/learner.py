"""The learner: everything that must match the sampler and the optimizer, in one object.

It owns the policy (wrapped for DDP/FSDP and unwrapped), the KL reference, optimizer, LR schedule,
accelerator, the sampling temperature and suppressed ids (the log-probs are taken under the
distribution the sampler drew from) and the micro-batch size. It computes log-probs (current,
old, reference) and runs `update(batch, advantages, token_weights) -> stats`.

pi_old: with one optimizer step per batch it is the current forward, detached (the ratio is 1).
With several (dapo, gspo) it is the sampler's log-probs when the sampler is the learner (HF
engine: they agree to float rounding, and one no-grad forward per step is saved), else one
no-grad forward of the learner before the update. Rollout correction (`algo.rollout_correction`)
weighs each token's loss by pi_old / pi_sampler, truncated or masked (`rollout_correction_weights`).

Micro-batches: `algo.grad_accum` equal shares of each mini-batch's rows, or with
`train.micro_batch_tokens` as many as the token budget needs (`mmrlvr.train.micro_batches`), for
the update and the no-grad forwards alike. Under several processes every rank runs as many
forwards and backward passes as the rank that needs most (zero-weight passes pad the others), so
DDP/FSDP/ZeRO collectives stay in step.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch
import torch.nn.functional as F

from mmrlvr.algos.losses import (
    aggregate, kl_penalty, masked_mean, policy_loss, rollout_correction_stats, rollout_correction_weights,
)
from mmrlvr.algos.sampling import truncation_mask
from mmrlvr.data.collate import select_rows
from mmrlvr.train.distributed import (
    all_max, all_reduce, dummy_vision_pass, rank_world, vision_needs_all_ranks,
)
from mmrlvr.train.micro_batches import RowLengths, forward_tokens, split_evenly
from mmrlvr.train.forward_rows import (  # noqa: F401 - re-exported
    LogprobOptions, batch_lengths, cheapest_row, forward_rows, in_step, split_rows, warn_over_budget,
)
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.train.nonfinite import NonFiniteUpdateError
from mmrlvr.train.update_stats import UpdateStats
from mmrlvr.types import RolloutBatch


def one_forward_update(algo, micro_batch_tokens: int | None = None) -> bool:
    """One optimizer step over one micro-batch: the update's single forward runs at the parameters
    the batch was weighed at and covers every row with a non-zero advantage, so token signals can
    take their clean log-probs and entropies from it (`token_roles.PendingWeighting`). A token
    budget (`train.micro_batch_tokens`) may split it, so it never counts as one forward."""
    return algo.ppo_epochs == 1 and algo.mini_batches == 1 and algo.grad_accum == 1 and micro_batch_tokens is None


def micro_rows(n: int, algo) -> int:
    """Rows per forward: the training micro-batch size, also used by the no-grad forwards."""
    return max(1, -(-n // max(1, algo.mini_batches * algo.grad_accum)))


def loss_mask(batch: RolloutBatch, algo) -> torch.Tensor:
    """(N, T) float: the sampled tokens (in episodes the policy's own: `batch.policy_mask`), minus
    truncated completions when `algo.mask_truncated`."""
    mask = batch.completion_mask.float()
    policy = getattr(batch, "policy_mask", None)  # None: every sampled token is the policy's
    if policy is not None:
        mask = mask * policy.float()
    return truncation_mask(batch.truncated, mask) if algo.mask_truncated else mask


def _has_media(batch: RolloutBatch, rows) -> bool:
    inputs = batch.prompt_inputs
    return any(inputs["_n_images"][r] or inputs["_n_videos"][r] for r in rows)


def rows_logprobs(model, batch: RolloutBatch, rows: list[int], opts: LogprobOptions, with_entropy: bool = False,
                  entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(len(rows), T) log-probs (and entropies) of some rows under the sampler's distribution
    (`opts`: its temperature and suppressed ids) with the forward's memory options.

    The forward runs only up to the longest completion among these rows (a causal model's
    earlier positions do not see the padding after it); the result is 0 on every padding position
    and on an episode's inserted tokens."""
    mask = batch.completion_mask[rows]
    t_all = mask.shape[1]
    t = max(1, int(mask.sum(1).max()))
    lp, ent = completion_logprobs(
        model, select_rows(batch.prompt_inputs, rows), batch.completion_ids[rows, :t], mask[:, :t],
        temperature=opts.temperature, suppress_ids=list(opts.suppress_ids), with_entropy=with_entropy,
        entropy_grad=entropy_grad, options=opts.forward,
    )
    keep = mask[:, :t].to(lp.device).bool()  # 0 on padding (rows shorter than the longest here): no one's values
    policy = getattr(batch, "policy_mask", None)
    if policy is not None:  # episodes: inserted tokens are context (a suppressed media id is -inf here)
        keep &= policy[rows, :t].to(lp.device).bool()
    lp = torch.where(keep, lp, torch.zeros_like(lp))
    ent = torch.where(keep, ent, torch.zeros_like(ent)) if ent is not None else None
    if t < t_all:
        lp = F.pad(lp, (0, t_all - t))
        ent = F.pad(ent, (0, t_all - t)) if ent is not None else None
    return lp, ent


@torch.no_grad()
def batch_logprobs(model, batch: RolloutBatch, opts: LogprobOptions, micro: int | None = None) -> torch.Tensor:
    """(N, T) log-probs of every row, `micro` rows per forward (default: all at once), or as many
    rows as `train.micro_batch_tokens` allows (`forward_rows`)."""
    chunks = forward_rows(model, batch, opts, micro)
    n = batch.completion_ids.shape[0]
    spare = [cheapest_row(batch_lengths(model, batch, opts), range(n))] if [] in chunks else None
    out = None
    for rows in chunks:
        take = rows or spare  # []: this rank is done; one row's forward keeps the collectives in step
        if not _has_media(batch, take) and vision_needs_all_ranks(model, grad=False):
            dummy_vision_pass(model)  # sharded weights: the all-gather needs every rank
        lp = rows_logprobs(model, batch, take, opts)[0]
        if not rows:
            continue
        if out is None:
            out = lp.new_zeros(batch.completion_ids.shape)
        out[rows] = lp
    return out


@dataclasses.dataclass
class _Targets:
    """What one update's micro-batches read, all (N, ...) and fixed for the update."""

    adv: torch.Tensor  # (N, 1) or (N, T)
    mask: torch.Tensor  # (N, T) loss mask
    old: torch.Tensor | None  # (N, T) pi_old, None: the current forward detached
    ref: torch.Tensor | None  # (N, T) reference log-probs (KL), None without KL
    sampler: torch.Tensor | None  # (N, T) the sampler's log-probs
    lengths: RowLengths  # what the update's forward pays for each row (the token budget's counts)
    pending: object | None = None  # token weights finished from the update's forward (`adv` unweighted)


def _denominator(mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """What the whole mini-batch divides by, so micro-batches add up to it exactly."""
    if aggregation == "token-mean":
        return mask.sum().clamp(min=1)
    return (mask.sum(1) > 0).sum().clamp(min=1).float()


class Learner:
    """The policy being trained and everything its update needs (see the module docstring).

    `cfg` is the resolved config; `model` the accelerator-prepared policy; `ref_model` a frozen
    copy (None without KL, or with LoRA: the base with the adapter switched off)."""

    def __init__(self, cfg, model, optimizer, accelerator, suppress_ids, *, scheduler=None, ref_model=None,
                 masters=None, weigher=None):
        self.cfg, self.algo = cfg, cfg.algo
        self.weigher = weigher  # the step's token weights (a method's `weights` hook built it); None: every token weighs 1
        self.masters = masters  # precision.MasterWeights the optimizer steps (a bf16 model in one process / DDP), or None
        self.model, self.policy = model, accelerator.unwrap_model(model)
        self.optimizer, self.scheduler, self.accelerator, self.ref_model = optimizer, scheduler, accelerator, ref_model
        self.suppress_ids = list(suppress_ids)
        self.read = LogprobOptions.of(cfg, self.suppress_ids)  # what every forward over a batch reads
        self.sampler_is_learner = cfg.rollout.engine == "hf"
        self.nonfinite_in_row = 0  # optimizer steps skipped in a row for a non-finite loss or gradient

    def micro(self, n: int) -> int:
        """Rows per no-grad forward without a token budget (`train.micro_batch_tokens` overrides it)."""
        return micro_rows(n, self.algo)

    def logprobs(self, batch: RolloutBatch, micro: int | None = None) -> torch.Tensor:
        """(N, T) log-probs of the batch under the current policy, no gradient."""
        return batch_logprobs(self.model, batch, self.read, micro)

    def reference_logprobs(self, batch: RolloutBatch, micro: int | None = None) -> torch.Tensor:
        """Log-probs under the reference policy: a frozen copy, or (LoRA) the base with the adapter off."""
        if self.ref_model is not None:
            return batch_logprobs(self.ref_model, batch, self.read, micro)
        with self.policy.disable_adapter():
            return batch_logprobs(self.model, batch, self.read, micro)

    def old_logprobs(self, batch: RolloutBatch, micro: int | None = None) -> torch.Tensor | None:
        """(N, T) pi_old for several optimizer steps per batch; None with one (the current forward is pi_old)."""
        if self.algo.ppo_epochs == 1 and self.algo.mini_batches == 1:
            return None
        s = batch.sampler_logprobs
        if self.sampler_is_learner and s is not None:
            valid = batch.completion_mask.bool()
            if bool(torch.isfinite(s[valid]).all()):  # a non-finite valid token: the learner's forward instead
                return torch.where(valid, s.float(), torch.zeros_like(s, dtype=torch.float32))
        return self.logprobs(batch, micro)

    def _targets(self, batch: RolloutBatch, advantages: torch.Tensor, token_weights: torch.Tensor | None,
                 pending) -> _Targets:
        if pending is not None and not one_forward_update(self.algo, self.cfg.train.micro_batch_tokens):
            raise ValueError("token weights from the update's own forward need one forward per update "
                             "(algo.ppo_epochs = algo.mini_batches = algo.grad_accum = 1, no train.micro_batch_tokens)")
        if pending is not None and token_weights is not None:
            raise ValueError("token weights are given up front or finished from the update's forward, not both")
        if token_weights is None:
            adv = advantages
        else:
            adv = advantages * token_weights.to(advantages.dtype).detach()
        micro = self.micro(adv.shape[0])
        if self.algo.rollout_correction != "none" and batch.sampler_logprobs is None:
            raise ValueError(f"algo.rollout_correction={self.algo.rollout_correction!r} needs the sampler's "
                             "log-probs, and the rollout engine returned none")
        return _Targets(adv, loss_mask(batch, self.algo), self.old_logprobs(batch, micro),
                        self.reference_logprobs(batch, micro) if self.algo.kl_coef > 0 else None,
                        batch.sampler_logprobs, batch_lengths(self.model, batch, self.read), pending)

    def weigh_and_update(self, batch: RolloutBatch, advantages: torch.Tensor, *, step: int,
                         diagnose: bool = False) -> tuple[dict, object]:
        """Step `step`'s update with its token weights: the weigher weighs the batch (from its own
        forwards, or from this update's forward: its decision), then `update`. Returns the
        update's stats (`time/update`: the update, with the signals it finished from its forward)
        and the finished `TokenWeighting` (None without a weigher)."""
        tw = None if self.weigher is None else self.weigher.start(self.policy, batch, advantages, step=step,
                                                                  diagnose=diagnose)
        t0 = time.perf_counter()
        stats = self.update(batch, advantages, None if tw is None else tw.weights,
                            pending=None if tw is None else tw.pending, seed=step)
        stats["time/update"] = time.perf_counter() - t0
        return stats, None if tw is None else tw.result

    def update(self, batch: RolloutBatch, advantages: torch.Tensor, token_weights: torch.Tensor | None = None,
               *, seed: int = 0, pending=None) -> dict:
        """`ppo_epochs` passes over the batch in `mini_batches` optimizer steps, each accumulated over
        `grad_accum` micro-batches, then one LR-schedule step. advantages (N, 1); token_weights
        (N, T) multiply them per token; or `pending` (a `token_roles.PendingWeighting`, one-forward
        updates only) computes them from this update's forward before the loss
        (`TokenWeighting.weights` and `.pending` are these two arguments). Sequences with zero
        advantage (and no KL/entropy term) are skipped in the forward: they add nothing to the
        gradient, only to the denominator, kept."""
        algo, world = self.algo, rank_world()[1]
        lr = self.optimizer.param_groups[0]["lr"]  # the rate this update uses
        tg = self._targets(batch, advantages, token_weights, pending)
        n = tg.adv.shape[0]
        multi = algo.ppo_epochs > 1 or algo.mini_batches > 1
        # rows that can move the gradient: a non-zero advantage, or a KL/entropy term on every row
        needed = tg.adv.ne(0).any(dim=1) if (tg.ref is None and not algo.entropy_coef) else torch.ones(n, dtype=torch.bool)
        stats, steps, skipped = UpdateStats(), 0, 0
        rng = torch.Generator().manual_seed(seed)
        for _ in range(algo.ppo_epochs):
            order = torch.randperm(n, generator=rng) if multi else torch.arange(n)
            for mb in [mb for mb in torch.tensor_split(order, algo.mini_batches) if len(mb)]:
                self._minibatch(batch, tg, mb, needed, stats)
                grad_norm = self.accelerator.clip_grad_norm_(self._stepped(), self.cfg.train.max_grad_norm)
                # the norm is of the reduced gradients, so every rank takes the same decision;
                # DeepSpeed returns none here and skips overflowing steps itself
                if grad_norm is None or math.isfinite(float(grad_norm)):
                    self.optimizer.step()
                    if self.masters is not None:
                        self.masters.put_weights()  # the model's bf16 weights, rounded from the updated masters
                    self.nonfinite_in_row = 0
                    stats.summed["grad_norm"] = stats.summed.get("grad_norm", 0.0) + float(grad_norm or 0.0)
                    steps += 1
                else:
                    skipped += 1
                    self.nonfinite_in_row += 1
                self.optimizer.zero_grad(set_to_none=True)
                if self.nonfinite_in_row >= self.cfg.train.max_nonfinite_steps:
                    raise NonFiniteUpdateError(
                        f"train: {self.nonfinite_in_row} optimizer steps in a row had a non-finite loss or gradient "
                        f"(skipped: the weights are those of the last finite step); lower train.lr, check the "
                        f"rewards and the data, or raise train.max_nonfinite_steps")
        if self.scheduler is not None:
            self.scheduler.step()  # once per RL step, like verl
        return {**stats.result(n, max(steps, 1), algo.ppo_epochs, world), "actor/lr": lr,
                "actor/nonfinite_skipped": float(skipped)}

    def micro_batches(self, rows: list[int], lengths: RowLengths) -> list[list[int]]:
        """One mini-batch's rows to update -> its micro-batches (`split_rows`): `algo.grad_accum`
        equal shares, or packed within `train.micro_batch_tokens`. Under several processes padded
        with empty passes (`in_step`) to what every rank runs: grad_accum, or the most any rank's
        budget needs."""
        budget, world = self.read.micro_batch_tokens, rank_world()[1]
        micros = split_rows(rows, budget, lambda: lengths, lambda r: split_evenly(r, self.algo.grad_accum))
        if world > 1:
            micros = in_step(micros, self.algo.grad_accum if budget is None else int(all_max(len(micros))))
        return micros

    def _stepped(self):
        """The tensors the optimizer steps: float32 masters, or the model's own parameters."""
        if self.masters is not None:
            return self.masters.params()
        return self.model.parameters()

    def _minibatch(self, batch: RolloutBatch, tg: _Targets, mb: torch.Tensor, needed: torch.Tensor, stats: UpdateStats) -> None:
        """Accumulate one mini-batch's gradient over its micro-batches (`micro_batches`); the loss
        of each is divided by the whole mini-batch's denominator, so they add up to its gradient."""
        algo, world = self.algo, rank_world()[1]
        denom = _denominator(tg.mask[mb], algo.aggregation)
        if world > 1:  # the global mini-batch's tokens (or sequences): all ranks' together
            denom = torch.full_like(denom, all_reduce([float(denom)])[0].item())
        for rows in self.micro_batches(mb[needed[mb]].tolist(), tg.lengths):
            if not rows:  # a zero-weight pass over one row: this rank had nothing more to update
                spare = [cheapest_row(tg.lengths, mb.tolist())]
                loss, _, _ = self._micro_loss(batch, spare, tg, denom)
                self.accelerator.backward(loss * 0.0)
                self._take_grads()
                stats.add_pass(forward_tokens(tg.lengths, spare)[0], 0)
                continue
            stats.add_pass(*forward_tokens(tg.lengths, rows))
            loss, s, ntok = self._micro_loss(batch, rows, tg, denom)
            # DDP/FSDP/ZeRO average gradients over ranks; the loss is already divided by the
            # global denominator, so undo the average to get the global sum
            self.accelerator.backward(loss * world if world > 1 else loss)
            self._take_grads()
            stats.add(s, float(ntok), len(rows))

    def _take_grads(self) -> None:
        """This micro-batch's (all-reduced) bf16 gradients, added onto the float32 masters."""
        if self.masters is not None:
            self.masters.take_grads()

    def _micro_loss(self, batch: RolloutBatch, rows: list[int], tg: _Targets, denom) -> tuple:
        algo = self.algo
        lp, ent = rows_logprobs(self.model, batch, rows, self.read, with_entropy=True,
                                entropy_grad=bool(algo.entropy_coef))
        m = tg.mask[rows].to(lp.device)
        old_lp = lp.detach() if tg.old is None else tg.old[rows].to(lp.device)
        correction, rc = self._correction(old_lp, tg.sampler, rows, m)
        adv = tg.adv[rows]
        if tg.pending is not None:  # the weighted rows are all in this one forward (one_forward_update)
            at = {r: i for i, r in enumerate(rows)}
            idx = [at[r] for r in tg.pending.rows]
            weights = tg.pending.finish(lp.detach()[idx], ent.detach()[idx])  # (N, T)
            adv = adv * weights[rows].to(adv.dtype)
        loss, stats = policy_loss(
            lp, old_lp, adv.to(lp.device), m, clip_low=algo.clip_low, clip_high=algo.clip_high,
            importance_level=algo.importance_level, aggregation=algo.aggregation,
            norm_length=algo.norm_length, denominator=denom, correction=correction, dual_clip=algo.dual_clip,
        )
        stats["policy"] = loss.detach()
        if tg.ref is not None:
            kl = aggregate(kl_penalty(lp, tg.ref[rows].to(lp.device), algo.kl_kind), m, algo.aggregation,
                           algo.norm_length, denom)
            loss = loss + algo.kl_coef * kl
            stats["kl"] = kl.detach()
        if algo.entropy_coef:
            loss = loss - algo.entropy_coef * aggregate(ent, m, algo.aggregation, algo.norm_length, denom)
        stats["entropy"] = masked_mean(ent.detach(), m)
        stats.update(rc)
        if not _has_media(batch, rows) and vision_needs_all_ranks(self.model, grad=True):
            loss = loss + dummy_vision_pass(self.model).to(loss.device)  # keeps every rank's vision tower in step
        return loss, stats, m.sum()

    def _correction(self, old_lp, sampler, rows, m) -> tuple[torch.Tensor | None, dict]:
        """Rollout-correction weights of these rows (None for `none`) and the drift statistics."""
        if sampler is None:
            return None, {}
        s = sampler[rows].to(old_lp.device)
        mode, cap = self.algo.rollout_correction, self.algo.rollout_correction_cap
        w = rollout_correction_weights(old_lp, s, m, mode, cap)
        rc = rollout_correction_stats(old_lp, s, m, w, mode, cap)
        return (None if mode == "none" else w), {f"rc_{k}": v for k, v in rc.items()}
