"""The pieces of one RL step that the loop calls in order: collect rollouts, then update."""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F

from mmrlvr.algos.advantages import compute_advantages
from mmrlvr.algos.losses import aggregate, kl_penalty, masked_mean, policy_loss
from mmrlvr.algos.sampling import GroupCollector, informative_groups, overlong_penalty, truncation_mask
from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts, select_rows
from mmrlvr.train.distributed import (
    all_max, all_reduce, all_sum_dict, dummy_vision_pass, rank_seed, rank_world, shard, vision_needs_all_ranks,
)
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.train.rewards import score_completions
from mmrlvr.train.temporal import temporal_contrast
from mmrlvr.types import RolloutBatch


class PromptStream:
    """Endless, seeded pass over the training prompts; `pos` is saved in checkpoints."""

    def __init__(self, samples, seed: int, pos: int = 0):
        self.samples, self.seed, self.pos = samples, seed, pos
        self._epoch, self._order = -1, []

    def take(self, n: int) -> list:
        out = []
        for _ in range(n):
            epoch, i = divmod(self.pos, len(self.samples))
            if epoch != self._epoch:  # a fresh seeded shuffle per pass over the data
                self._epoch, self._order = epoch, list(range(len(self.samples)))
                random.Random(f"data-{self.seed}-{epoch}").shuffle(self._order)
            out.append(self.samples[self._order[i]])
            self.pos += 1
        return out


def local_prompts(b: int, world: int) -> int:
    """This rank's share of the global `rollout.prompts_per_step`."""
    if b % world:
        raise ValueError(f"rollout.prompts_per_step={b} must be divisible by the number of processes ({world})")
    return b // world


def collect(engine, stream: PromptStream, scorer, cfg, algo, seed: int) -> RolloutBatch:
    """Sample G completions for B prompts and score them; with dynamic sampling, drop groups
    whose rewards are all equal and sample again (at most `max_rounds` rounds).

    With several processes every rank draws the same global prompts from its copy of the
    stream and keeps its own contiguous share (whole groups), samples with its own seed, and
    the ranks agree on the number of rounds, so streams and collective calls stay in step."""
    rank, world = rank_world()
    b, g = local_prompts(cfg.rollout.prompts_per_step, world), cfg.rollout.group_size
    collector = GroupCollector(b, filter_groups=algo.dynamic_sampling)
    metrics: dict = {}
    t_gen = t_score = 0.0
    n_tokens = 0
    last = None
    while True:
        need = int(all_max(b - len(collector.kept) if algo.dynamic_sampling else b))
        prompts = shard(stream.take(need * world), rank, world)
        t0 = time.perf_counter()
        policy = getattr(engine, "model", None)
        if policy is not None and not any(p.images or p.videos for p in prompts) and vision_needs_all_ranks(policy, grad=False):
            with torch.no_grad():
                dummy_vision_pass(policy)  # generate's prefill runs the tower on the other ranks
        out = engine.rollout(prompts, g, cfg.rollout, seed=rank_seed(seed * 1000 + collector.rounds, rank, world))
        t1 = time.perf_counter()
        rewards, rmetrics, verdicts = score_completions(out.completions, prompts, g, cfg.rewards, scorer)
        # temporal contrast: the same frames shuffled, scored, not trained on -> a bonus per prompt
        rewards, tmetrics = temporal_contrast(engine, prompts, rewards, verdicts, cfg, scorer,
                                              seed=rank_seed(seed * 1000 + 500 + collector.rounds, rank, world))
        t_score += time.perf_counter() - t1
        t_gen += t1 - t0
        n_tokens += int(out.completion_mask.sum())
        if collector.rounds == 0:
            metrics.update(rmetrics)
            metrics.update(tmetrics)
            metrics["rollout/mixed_group_frac"] = informative_groups(rewards).float().mean().item()
        groups = [
            (prompts[i], out.completions[i * g : (i + 1) * g], rewards[i], verdicts[i * g : (i + 1) * g])
            for i in range(len(prompts))
        ]
        collector.add(rewards, groups)
        last = (prompts, out, rewards, verdicts)
        all_done = all_reduce([0.0 if collector.done else 1.0], "max")[0] == 0
        if all_done or collector.rounds >= max(1, algo.max_rounds):
            break
    if collector.rounds == 1 and not algo.dynamic_sampling:
        prompts, out, rewards, verdicts = last
        inputs = repeat_prompts(out.prompt_inputs, g)
        ids, mask = out.completion_ids, out.completion_mask
        comps = out.completions
    else:
        chosen = collector.batch()
        prompts = [grp[0] for grp in chosen]
        comps = [c for grp in chosen for c in grp[1]]
        rewards = torch.stack([grp[2] for grp in chosen])
        verdicts = [v for grp in chosen for v in grp[3]]
        inputs = repeat_prompts(encode_prompts(engine.processor, prompts), g)
        ids, mask = pad_right([c.token_ids for c in comps], engine.pad_id)
    metrics.update({
        "rollout/rounds": collector.rounds,
        "rollout/dropped_groups": len(collector.dropped),
        "rollout/tokens_per_s": n_tokens / max(t_gen, 1e-9),
        "rollout/mean_length": mask.sum(1).float().mean().item(),
        "time/rollout": t_gen,
        "time/score": t_score,
    })
    truncated = torch.tensor([c.truncated for c in comps])
    metrics["rollout/truncated_frac"] = truncated.float().mean().item()
    return RolloutBatch(prompts, inputs, ids, mask, truncated, rewards, [c.text for c in comps], verdicts, metrics)


def advantages_for(batch: RolloutBatch, cfg, algo) -> tuple[torch.Tensor, torch.Tensor]:
    """Shaped rewards -> per-sequence advantages (N, 1) and the loss mask (N, T)."""
    rewards = batch.rewards.clone()
    if algo.overlong_buffer > 0:
        lengths = batch.completion_mask.sum(1)
        shaped = overlong_penalty(lengths, cfg.rollout.max_new_tokens, algo.overlong_buffer, algo.overlong_factor)
        rewards = rewards + shaped.view_as(rewards)
    adv = compute_advantages(algo.advantage, rewards).reshape(-1, 1)
    mask = batch.completion_mask.float()
    if algo.mask_truncated:
        mask = truncation_mask(batch.truncated, mask)
    return adv, mask


def _denominator(mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """What the whole mini-batch divides by, so micro-batches add up to it exactly."""
    if aggregation == "token-mean":
        return mask.sum().clamp(min=1)
    return (mask.sum(1) > 0).sum().clamp(min=1).float()


def micro_rows(n: int, algo) -> int:
    """Rows per forward: the training micro-batch size, also used by the no-grad forwards."""
    return max(1, -(-n // max(1, algo.mini_batches * algo.grad_accum)))


def rows_logprobs(model, batch: RolloutBatch, rows: list[int], cfg, suppress, with_entropy: bool = False,
                  entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(len(rows), T) log-probs (and entropies) of some rows of the batch.

    The forward runs only up to the longest completion among these rows (a causal model's
    earlier positions do not see the padding after it); the result is padded back to T with 0.
    """
    mask = batch.completion_mask[rows]
    t_all = mask.shape[1]
    t = max(1, int(mask.sum(1).max()))
    lp, ent = completion_logprobs(
        model, select_rows(batch.prompt_inputs, rows), batch.completion_ids[rows, :t], mask[:, :t],
        temperature=cfg.rollout.temperature, suppress_ids=suppress, with_entropy=with_entropy,
        entropy_grad=entropy_grad,
    )
    if t < t_all:
        lp = F.pad(lp, (0, t_all - t))
        ent = F.pad(ent, (0, t_all - t)) if ent is not None else None
    return lp, ent


def _has_media(batch: RolloutBatch, rows) -> bool:
    inputs = batch.prompt_inputs
    return any(inputs["_n_images"][r] or inputs["_n_videos"][r] for r in rows)


def _micro_loss(model, batch: RolloutBatch, rows, adv, mask, old, ref, algo, cfg, suppress, denom):
    lp, ent = rows_logprobs(model, batch, rows, cfg, suppress, with_entropy=True,
                            entropy_grad=bool(algo.entropy_coef))
    m = mask[rows].to(lp.device)
    old_lp = lp.detach() if old is None else old[rows].to(lp.device)
    loss, stats = policy_loss(
        lp, old_lp, adv[rows].to(lp.device), m, clip_low=algo.clip_low, clip_high=algo.clip_high,
        importance_level=algo.importance_level, aggregation=algo.aggregation,
        norm_length=algo.norm_length, denominator=denom,
    )
    stats["policy"] = loss.detach()
    if ref is not None:
        kl = aggregate(kl_penalty(lp, ref[rows].to(lp.device), algo.kl_kind), m, algo.aggregation, algo.norm_length, denom)
        loss = loss + algo.kl_coef * kl
        stats["kl"] = kl.detach()
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * aggregate(ent, m, algo.aggregation, algo.norm_length, denom)
    stats["entropy"] = masked_mean(ent.detach(), m)
    if not _has_media(batch, rows) and vision_needs_all_ranks(model, grad=True):
        loss = loss + dummy_vision_pass(model).to(loss.device)  # keeps every rank's vision tower in step
    return loss, stats, m.sum()


@torch.no_grad()
def batch_logprobs(model, batch: RolloutBatch, cfg, suppress, micro: int | None = None) -> torch.Tensor:
    """(N, T) log-probs of every row, `micro` rows per forward (default: all at once)."""
    n = batch.completion_ids.shape[0]
    micro = micro or n
    parts = []
    for s in range(0, n, micro):
        rows = list(range(s, min(n, s + micro)))
        if not _has_media(batch, rows) and vision_needs_all_ranks(model, grad=False):
            dummy_vision_pass(model)  # sharded weights: the all-gather needs every rank
        parts.append(rows_logprobs(model, batch, rows, cfg, suppress)[0])
    return torch.cat(parts, dim=0)


def reference_logprobs(model, ref_model, batch: RolloutBatch, cfg, suppress, micro: int | None = None) -> torch.Tensor:
    """Log-probs under the reference policy: a frozen copy, or (LoRA) the base with the adapter off."""
    if ref_model is not None:
        return batch_logprobs(ref_model, batch, cfg, suppress, micro)
    with getattr(model, "module", model).disable_adapter():  # unwrap DDP
        return batch_logprobs(model, batch, cfg, suppress, micro)


def update(model, ref_model, optimizer, accelerator, batch: RolloutBatch, cfg, algo, suppress, seed: int,
           token_weights: torch.Tensor | None = None) -> dict:
    """`ppo_epochs` passes over the batch in `mini_batches` optimizer steps, each accumulated over
    `grad_accum` micro-batches. Sequences with zero advantage (and no KL/entropy term) are skipped
    in the forward: they add nothing to the gradient, only to the denominator, which is kept.
    `token_weights` (N, T), computed once for the whole batch, multiply the advantages per token."""
    adv, mask = advantages_for(batch, cfg, algo)
    if token_weights is not None:
        adv = adv * token_weights.to(adv.dtype).detach()  # (N, 1) -> (N, T)
    world = rank_world()[1]
    n = adv.shape[0]
    multi = algo.ppo_epochs > 1 or algo.mini_batches > 1
    micro = micro_rows(n, algo)
    old = batch_logprobs(model, batch, cfg, suppress, micro) if multi else None
    ref = reference_logprobs(model, ref_model, batch, cfg, suppress, micro) if algo.kl_coef > 0 else None
    # rows that can move the gradient: a non-zero advantage, or a KL/entropy term on every row
    needed = adv.ne(0).any(dim=1) if (ref is None and not algo.entropy_coef) else torch.ones(n, dtype=torch.bool)
    summed: dict = {}  # already divided by the mini-batch denominator: add up per step
    weighted: dict = {}  # per-token means: weight by tokens
    tokens = 0.0
    updated = 0
    rng = torch.Generator().manual_seed(seed)
    steps = 0
    for _ in range(algo.ppo_epochs):
        order = torch.randperm(n, generator=rng) if multi else torch.arange(n)
        for mb in [mb for mb in torch.tensor_split(order, algo.mini_batches) if len(mb)]:
            denom = _denominator(mask[mb], algo.aggregation)
            if world > 1:  # the global mini-batch's tokens (or sequences): all ranks' together
                denom = torch.full_like(denom, all_reduce([float(denom)])[0].item())
            active = mb[needed[mb]].tolist()
            micros = [sorted(m) for m in (active[i::algo.grad_accum] for i in range(algo.grad_accum)) if m]
            if world > 1:  # every rank runs grad_accum backward passes: DDP/FSDP/ZeRO stay in step
                micros += [[]] * (algo.grad_accum - len(micros))
            for rows in micros:
                if not rows:  # a zero-weight pass over one row: this rank had nothing to update
                    loss, _, _ = _micro_loss(model, batch, [int(mb[0])], adv, mask, old, ref, algo, cfg, suppress, denom)
                    accelerator.backward(loss * 0.0)
                    continue
                loss, stats, ntok = _micro_loss(model, batch, rows, adv, mask, old, ref, algo, cfg, suppress, denom)
                # DDP/FSDP/ZeRO average gradients over ranks; the loss is already divided by the
                # global denominator, so undo the average to get the global sum
                accelerator.backward(loss * world if world > 1 else loss)
                for k, v in stats.items():
                    if k in ("policy", "kl"):
                        summed[k] = summed.get(k, 0.0) + float(v)
                    else:
                        weighted[k] = weighted.get(k, 0.0) + float(v) * float(ntok)
                tokens += float(ntok)
                updated += len(rows)
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.train.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            summed["grad_norm"] = summed.get("grad_norm", 0.0) + float(grad_norm)
            steps += 1
    steps = max(steps, 1)
    if world > 1:  # the global batch's statistics, the same on every rank
        totals = all_sum_dict({**{f"s/{k}": v for k, v in summed.items() if k != "grad_norm"},
                               **{f"w/{k}": v for k, v in weighted.items()}, "tokens": tokens,
                               "updated": float(updated), "n": float(n)})
        summed.update({k[2:]: v for k, v in totals.items() if k.startswith("s/")})
        weighted = {k[2:]: v for k, v in totals.items() if k.startswith("w/")}
        tokens, updated, n = totals["tokens"], totals["updated"], totals["n"]
    out = {f"actor/{k}": v / max(tokens, 1.0) for k, v in weighted.items()}
    out["loss/policy"] = summed.get("policy", 0.0) / steps
    out["loss/kl"] = summed.get("kl", 0.0) / steps
    out["actor/grad_norm"] = summed.get("grad_norm", 0.0) / steps
    out["actor/updated_seqs_frac"] = updated / max(n * algo.ppo_epochs, 1)
    return out
