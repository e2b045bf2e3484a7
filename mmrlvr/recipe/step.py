"""Collecting one RL step's rollouts, and turning their rewards into advantages.

`collect` samples rounds of prompts until the batch is full. After each round is scored, the
collect steps run in order, each a function `fn(rnd: Round, ctx: CollectContext) -> Round` that
may change the round's rewards or which groups it keeps: the active methods' `collect` hooks
(`mmrlvr.methods`), then dynamic sampling, which drops flat groups. A method that generates its
rounds itself fills `generate` (and `learn`, which hears the round's rewards); the estimator's
settings come from the methods' `estimator` hook. This file names no method.

`cfg` is always the resolved config (`mmrlvr.checks.resolve.resolve_config`): `cfg.algo` holds no None.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch

from mmrlvr.algos.advantages import EstimatorContext, estimate, flatten_groups, pad_groups
from mmrlvr.algos.sampling import GroupCollector, informative_groups, longest_run, overlong_penalty
from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts, select_rows
from mmrlvr.methods import hooks
from mmrlvr.methods.round import CollectContext, Round
from mmrlvr.rollout.episodes import (episode_metrics, episode_prompts, policy_mask_of, role_reward_metrics, run_episodes,
                                     with_inserted_media)
from mmrlvr.train.distributed import all_max, all_reduce, dummy_vision_pass, rank_seed, rank_world, shard, vision_needs_all_ranks
from mmrlvr.train.rewards import score_completions
from mmrlvr.types import Group, RolloutBatch, Sample
from mmrlvr.verifiers.failures import failed_frac

__all__ = ["CollectContext", "Round", "collect", "advantages_for", "strategies_for"]


def drop_flat_groups(rnd: Round, ctx: CollectContext) -> Round:
    """Dynamic sampling (DAPO): a group whose rewards are all equal teaches nothing; drop it."""
    if not ctx.cfg.algo.dynamic_sampling:
        return rnd
    return dataclasses.replace(rnd, keep=rnd.keep & informative_groups(rnd.rewards))


def strategies_for(cfg) -> tuple[Callable[[Round, CollectContext], Round], ...]:
    """The collect steps of a run of `cfg`, in order: the active methods' `collect` hooks, then
    dynamic sampling (last, so it judges the rewards the methods left)."""
    return (*hooks.collect_steps(cfg), drop_flat_groups)


def local_prompts(b: int, world: int) -> int:
    """This rank's share of the global `rollout.prompts_per_step`."""
    if b % world:
        raise ValueError(f"rollout.prompts_per_step={b} must be divisible by the number of processes ({world})")
    return b // world


def round_seed(seed: int, index: int) -> int:
    """This rank's rollout seed for round `index` of the step whose seed is `seed`."""
    rank, world = rank_world()
    return rank_seed(seed * 1000 + index, rank, world)


def round_prompts(stream, need: int, step: int) -> list[Sample]:
    """This rank's share of a round's prompts (every rank draws the same global `need * world`)."""
    rank, world = rank_world()
    return shard(stream.take(need * world, step), rank, world)


def _sample_round(engine, stream, scorer, cfg, need: int, seed: int, step: int, index: int, generator=None) -> Round:
    """`generator`: (method, its state) of the method that generates rounds itself, or None."""
    prompts = episode_prompts(cfg.rollout, round_prompts(stream, need, step))  # an episode's first role's prompts
    policy = getattr(engine, "model", None)
    if policy is not None and not any(p.images or p.videos for p in prompts) and vision_needs_all_ranks(policy, grad=False):
        with torch.no_grad():
            dummy_vision_pass(policy)  # generate's prefill runs the tower on the other ranks
    g = cfg.rollout.group_size
    t0 = time.perf_counter()
    if generator is not None:  # a method's own generation (its `generate` hook)
        method, state = generator
        out, pending = method.generate(state, engine, prompts, cfg.rollout, round_seed(seed, index))
    else:
        out = run_episodes(engine, prompts, g, cfg.rollout, seed=round_seed(seed, index),
                           step=step, return_logprobs=True)
    gen_s = time.perf_counter() - t0
    if getattr(out, "gen_seconds", None) is not None:  # generated ahead, during the last update
        gen_s = out.gen_seconds
    rewards, metrics, verdicts = score_completions(out.completions, prompts, g, cfg.rewards, scorer)
    if generator is not None and method.learn is not None:  # verifier rewards, before any collect step's bonus
        metrics.update(method.learn(state, pending, rewards))
    if getattr(cfg.rollout, "episode", "single") != "single":
        metrics.update({**episode_metrics(out.completions), **role_reward_metrics(out.completions, rewards)})
    return Round(prompts, out, rewards, verdicts, torch.ones(len(prompts), dtype=torch.bool), metrics, index, gen_s)


def verifier_rewards(rnd: Round) -> torch.Tensor:
    """(B, G) the verifiers' rewards, without what strategies added: what statistics learn from."""
    return rnd.rewards if rnd.bonus is None else rnd.rewards - rnd.bonus


def _groups(rnd: Round) -> list[Group]:
    """The round's groups, one per prompt, with a strategy's replacement where it made one."""
    g = rnd.rewards.shape[1]
    lp, lengths = rnd.out.sampler_logprobs, [len(c.token_ids) for c in rnd.out.completions]
    per = [lp[i, : lengths[i]] if lp is not None else None for i in range(len(lengths))]
    return [Group.of(rnd.replaced[i]) if i in rnd.replaced else
            Group(rnd.prompts[i], rnd.out.completions[i * g: (i + 1) * g], rnd.rewards[i],
                  rnd.verdicts[i * g: (i + 1) * g], per[i * g: (i + 1) * g], None if rnd.bonus is None else rnd.bonus[i])
            for i in range(len(rnd.prompts))]


def collect(engine, stream, scorer, cfg, seed: int, step: int = 0,
            strategies: tuple | None = None, generator=None, states: dict | None = None) -> RolloutBatch:
    """Sample G completions for B prompts, score them and run the strategies; with dynamic
    sampling, sample again while groups are dropped (at most `algo.max_rounds` rounds). With several processes every rank draws the same global prompts from its copy of the
    stream and keeps its own contiguous share (whole groups), samples with its own seed, and
    the ranks agree on the number of rounds, so streams and collective calls stay in step.
    `strategies`: the collect steps (None: `strategies_for(cfg)`); `generator`: (method, state)
    of the method that generates each round itself (`hooks.Live.generator()`), or None;
    `states`: the active methods' run-time state by name (`hooks.Live.states`), for collect steps."""
    strategies = strategies_for(cfg) if strategies is None else strategies
    b = local_prompts(cfg.rollout.prompts_per_step, rank_world()[1])
    collector = GroupCollector(b, filter_groups=False)  # the strategies decide what is kept
    metrics: dict = {}
    scored: list = []
    verdicts: list = []  # every completion scored this step, also in groups dynamic sampling drops
    extras: list = []  # strategies' own groups, trained on after the collected ones
    t_gen = t_score = 0.0
    n_tokens = 0
    versions: list = []  # each round's policy version (server engine), None where the engine has none
    while True:
        need = int(all_max(b - len(collector.kept) if cfg.algo.dynamic_sampling else b))
        t0 = time.perf_counter()
        rnd = _sample_round(engine, stream, scorer, cfg, need, seed, step, collector.rounds, generator)
        ctx = CollectContext(engine, scorer, cfg, seed, step, states if states is not None else {})
        for strategy in strategies:
            rnd = strategy(rnd, ctx)
        t_gen += rnd.gen_s
        t_score += time.perf_counter() - t0 - rnd.gen_s
        n_tokens += int(rnd.out.completion_mask.sum())
        versions.append(getattr(rnd.out, "policy_version", None))
        if rnd.index == 0:
            metrics.update(rnd.metrics)
            metrics["rollout/mixed_group_frac"] = informative_groups(rnd.rewards).float().mean().item()
        collector.add_round(rnd.keep, _groups(rnd))
        extras += [Group.of(grp) for grp in rnd.extra_groups + rnd.derived_groups]
        scored += [(s.id, r) for s, r in zip(rnd.prompts, verifier_rewards(rnd).tolist())]
        verdicts += rnd.verdicts
        scored += [(grp.prompt.id, grp.rewards.tolist()) for grp in map(Group.of, rnd.extra_groups)]
        all_done = all_reduce([0.0 if collector.done else 1.0], "max")[0] == 0
        if all_done or collector.rounds >= max(1, cfg.algo.max_rounds):
            break
    whole = (collector.rounds == 1 and not cfg.algo.dynamic_sampling and bool(rnd.keep.all()) and not extras
             and not rnd.replaced)
    batch = _rectangular_batch(rnd) if whole else _batch(collector.batch() + extras, engine)
    batch.metrics.update(metrics)
    batch.scored = scored
    batch.policy_version = min(versions) if versions and None not in versions else None
    batch.metrics.update({
        "rollout/rounds": collector.rounds,
        "rollout/dropped_groups": len(collector.dropped),
        "rollout/tokens_per_s": n_tokens / max(t_gen, 1e-9),
        "rollout/mean_length": batch.completion_mask.sum(1).float().mean().item(),
        "rollout/max_length": int(batch.completion_mask.sum(1).max()) if batch.completion_mask.numel() else 0,
        "rollout/truncated_frac": batch.truncated.float().mean().item(),
        "verifier/failed_frac": failed_frac(verdicts),  # an all-failed group scores flat: dynamic sampling drops it
        "time/rollout": t_gen,
        "time/score": t_score,
    })
    return batch


def _rectangular_batch(rnd: Round) -> RolloutBatch:
    """One round kept whole: the engine's own tensors, nothing re-encoded."""
    out, g = rnd.out, rnd.rewards.shape[1]
    comps = out.completions
    return RolloutBatch(rnd.prompts, with_inserted_media(repeat_prompts(out.prompt_inputs, g), comps), out.completion_ids,
                        out.completion_mask, torch.tensor([c.truncated for c in comps]), rnd.rewards,
                        [c.text for c in comps], rnd.verdicts, {}, out.sampler_logprobs,
                        policy_mask=policy_mask_of(comps, out.completion_mask.shape), bonus=rnd.bonus)


def repeat_groups(inputs: dict, sizes: list[int]) -> dict:
    """(B, ...) prompt inputs -> (sum(sizes), ...), prompt b repeated sizes[b] times contiguously."""
    if len(set(sizes)) <= 1:
        return repeat_prompts(inputs, sizes[0] if sizes else 1)
    n = len(inputs["_n_images"])
    return select_rows({**inputs, "_base": inputs, "_row_prompt": list(range(n))},
                       [r for r in range(n) for _ in range(sizes[r])])


def _batch(chosen: list[Group], engine) -> RolloutBatch:
    """Groups from several rounds (or of unequal size): re-encoded prompts, re-padded rows."""
    prompts = [grp.prompt for grp in chosen]
    comps = [c for grp in chosen for c in grp.completions]
    rewards, sizes = pad_groups([grp.rewards for grp in chosen])
    ids, mask = pad_right([c.token_ids for c in comps], engine.pad_id)
    lps = [lp for grp in chosen for lp in grp.sampler_logprobs]
    sampler = None
    if all(lp is not None for lp in lps):
        sampler = torch.zeros(mask.shape, dtype=torch.float32)
        for i, lp in enumerate(lps):
            sampler[i, : len(lp)] = lp
    uneven = len(set(sizes)) > 1
    bonus = None
    if any(grp.bonus is not None for grp in chosen):
        bonus = pad_groups([grp.bonus if grp.bonus is not None else torch.zeros_like(grp.rewards) for grp in chosen])[0]
    inputs = with_inserted_media(repeat_groups(encode_prompts(engine.processor, prompts), sizes), comps)
    return RolloutBatch(prompts, inputs, ids, mask, torch.tensor([c.truncated for c in comps]), rewards,
                        [c.text for c in comps], [v for grp in chosen for v in grp.verdicts], {}, sampler,
                        sizes if uneven else None, policy_mask=policy_mask_of(comps, mask.shape), bonus=bonus)


def overlong_lengths(batch: RolloutBatch) -> torch.Tensor:
    """(N,) the lengths DAPO's overlong penalty reads against rollout.max_new_tokens: a completion's
    tokens, or in an episode its longest policy turn (each turn is one generation capped at
    max_new_tokens; inserted messages are not the policy's, and the number of turns is the
    episode's to decide, so a sum over turns would penalise an episode for taking more of them)."""
    if batch.policy_mask is None:
        return batch.completion_mask.sum(1)
    return longest_run(batch.completion_mask * batch.policy_mask)


def advantages_for(batch: RolloutBatch, cfg, context: EstimatorContext | None = None) -> torch.Tensor:
    """Shaped rewards -> per-sequence advantages (N, 1) by the estimator `algo.advantage`.

    `context` (prompt ids, step, per-prompt statistics) is handed to stateful estimators (one that
    keeps per-prompt posteriors reads and updates them there: call once per batch), with the
    batch's collect-step bonus and the estimator's settings (the methods' `estimator` hook) added;
    None: the batch's prompts at step 0, no statistics."""
    algo, sizes = cfg.algo, batch.group_sizes
    rewards = batch.rewards.clone()
    if algo.overlong_buffer > 0:
        lengths = overlong_lengths(batch)
        shaped = overlong_penalty(lengths, cfg.rollout.max_new_tokens, algo.overlong_buffer, algo.overlong_factor)
        if sizes is None:
            rewards = rewards + shaped.view_as(rewards)
        else:
            rewards = rewards + pad_groups(list(torch.split(shaped, sizes)))[0].nan_to_num(0.0)
    context = context if context is not None else EstimatorContext(batch.sample_ids, 0)
    context = dataclasses.replace(context, bonus=batch.bonus, settings=hooks.estimator_settings(cfg))
    per_group = estimate(algo.advantage, rewards, context)
    return flatten_groups(per_group, sizes).reshape(-1, 1)
