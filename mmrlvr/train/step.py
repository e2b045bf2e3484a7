"""Collecting one RL step's rollouts, and turning their rewards into advantages.

`collect` samples rounds of prompts until the batch is full. After each round is scored, the
collect-time strategies run in order, each a named function `fn(rnd: Round, ctx: CollectContext)
-> Round` that may change the round's rewards or which groups it keeps (temporal contrast adds
its bonus, dynamic sampling drops flat groups); a new method (replay, hints, demonstrations) is
one more such function in `STRATEGIES`, never a callback or a subclass.

`cfg` is always the resolved config (`mmrlvr.algos.presets.resolve_config`): `cfg.algo` holds no None.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch

from mmrlvr.algos.advantages import EstimatorContext, estimate, flatten_groups, pad_groups
from mmrlvr.algos.sampling import GroupCollector, informative_groups, longest_run, overlong_penalty
from mmrlvr.data.collate import encode_prompts, pad_right, repeat_prompts, select_rows
from mmrlvr.rollout.episodes import (episode_metrics, episode_prompts, policy_mask_of, role_reward_metrics, run_episodes,
                                     with_inserted_media)
from mmrlvr.train.hill import hill_hints
from mmrlvr.train.prco import solve_captions
from mmrlvr.train.distributed import all_max, all_reduce, dummy_vision_pass, rank_seed, rank_world, shard, vision_needs_all_ranks
from mmrlvr.train.rewards import score_completions
from mmrlvr.train.temporal import temporal_contrast
from mmrlvr.types import Group, RolloutBatch, Sample
from mmrlvr.verifiers.failures import failed_frac

@dataclasses.dataclass
class Round:
    """One sampling round after scoring: B prompts, their groups, and which groups are kept."""

    prompts: list[Sample]
    out: object  # the engine's RolloutOutput (completions, ids, mask, sampler_logprobs)
    rewards: torch.Tensor  # (B, G)
    verdicts: list  # B * G
    keep: torch.Tensor  # (B,) bool
    metrics: dict
    index: int  # 0 for the first round of the step
    gen_s: float = 0.0  # seconds spent generating (the rest of the round is scoring)
    extra_groups: list[Group] = dataclasses.field(default_factory=list)
    """Groups a strategy adds beyond the engine's (a demonstration, a hinted prompt); their sizes may
    differ from G. They are kept (trained on) after the round's own groups."""
    bonus: torch.Tensor | None = None  # (B, G) added by strategies inside `rewards` (None: nothing)
    replaced: dict[int, Group] = dataclasses.field(default_factory=dict)
    """{b: group} trained on instead of the round's group b (HiLL: the best hint's re-rollouts); the
    prompt source and statistics still hear the round's own group b."""
    derived_groups: list[Group] = dataclasses.field(default_factory=list)
    """Groups a strategy made from the round's prompts (HiLL's hinter prompts): trained on after the
    round's own, never fed back to the prompt source (their prompts are not the source's)."""


@dataclasses.dataclass
class CollectContext:
    """What strategies may use: the engine and scorer (to sample or score more), the resolved
    config, the round's seed and the step."""

    engine: object
    scorer: object
    cfg: object
    seed: int
    step: int


def temporal_contrast_bonus(rnd: Round, ctx: CollectContext) -> Round:
    """Video prompts answered again on shuffled frames (scored, never trained on) -> a reward bonus."""
    rank, world = rank_world()
    rewards, metrics = temporal_contrast(ctx.engine, rnd.prompts, rnd.rewards, rnd.verdicts, ctx.cfg, ctx.scorer,
                                         seed=rank_seed(ctx.seed * 1000 + 500 + rnd.index, rank, world))
    if rewards is rnd.rewards:
        return rnd
    added = (rewards - rnd.rewards).nan_to_num(0.0) + (rnd.bonus if rnd.bonus is not None else 0.0)
    return dataclasses.replace(rnd, rewards=rewards, bonus=added, metrics={**rnd.metrics, **metrics})


def drop_flat_groups(rnd: Round, ctx: CollectContext) -> Round:
    """Dynamic sampling (DAPO): a group whose rewards are all equal teaches nothing; drop it."""
    if not ctx.cfg.algo.dynamic_sampling:
        return rnd
    return dataclasses.replace(rnd, keep=rnd.keep & informative_groups(rnd.rewards))


EPISODE_STRATEGIES: dict[str, Callable] = {"prco": solve_captions, "hill": hill_hints}
"""An episode's own collect step, by `rollout.episode` (prco: the Solver answers each caption; hill: hints
for the groups with no correct answer, and the hinted re-rollouts)."""


def episode_strategy(rnd: Round, ctx: CollectContext) -> Round:
    own = EPISODE_STRATEGIES.get(getattr(ctx.cfg.rollout, "episode", "single"))
    return rnd if own is None else own(rnd, ctx)


STRATEGIES: tuple[Callable[[Round, CollectContext], Round], ...] = (temporal_contrast_bonus, episode_strategy,
                                                                    drop_flat_groups)


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


def _sample_round(engine, stream, scorer, cfg, need: int, seed: int, step: int, index: int, pruner=None) -> Round:
    prompts = episode_prompts(cfg.rollout, round_prompts(stream, need, step))  # prco: the Observer's prompts
    policy = getattr(engine, "model", None)
    if policy is not None and not any(p.images or p.videos for p in prompts) and vision_needs_all_ranks(policy, grad=False):
        with torch.no_grad():
            dummy_vision_pass(policy)  # generate's prefill runs the tower on the other ranks
    g = cfg.rollout.group_size
    t0 = time.perf_counter()
    if pruner is not None:  # arrol: over-generate, prune at the prefix (mmrlvr/train/arrol_round.py)
        out, pending = pruner.generate(engine, prompts, cfg.rollout, seed=round_seed(seed, index))
    else:
        out = run_episodes(engine, prompts, g, cfg.rollout, seed=round_seed(seed, index),
                           step=step, return_logprobs=True)
    gen_s = time.perf_counter() - t0
    if getattr(out, "gen_seconds", None) is not None:  # generated ahead, during the last update
        gen_s = out.gen_seconds
    rewards, metrics, verdicts = score_completions(out.completions, prompts, g, cfg.rewards, scorer)
    if pruner is not None:  # the head learns the survivors' outcomes (verifier rewards, before any bonus)
        metrics.update(pruner.learn(pending, rewards))
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
            strategies: tuple = STRATEGIES, pruner=None) -> RolloutBatch:
    """Sample G completions for B prompts, score them and run the strategies; with dynamic
    sampling, sample again while groups are dropped (at most `algo.max_rounds` rounds).

    With several processes every rank draws the same global prompts from its copy of the
    stream and keeps its own contiguous share (whole groups), samples with its own seed, and
    the ranks agree on the number of rounds, so streams and collective calls stay in step.
    `pruner` (arrol's `ArrolPruner`, or None) generates each round by online rollout pruning."""
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
        rnd = _sample_round(engine, stream, scorer, cfg, need, seed, step, collector.rounds, pruner)
        ctx = CollectContext(engine, scorer, cfg, seed, step)
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


def dbb_options(cfg):
    """`sample_efficiency.dbb`'s settings and the verifiers' largest reward, as the estimator dbb reads them."""
    from mmrlvr.algos.posteriors import DbbOptions
    from mmrlvr.config.efficiency import max_reward

    d = cfg.sample_efficiency.dbb
    return DbbOptions(lam=d.lam, eps=d.eps, scale=d.scale, include_current=d.include_current, max_reward=max_reward(cfg))


def overlong_lengths(batch: RolloutBatch) -> torch.Tensor:
    """(N,) the lengths DAPO's overlong penalty reads against rollout.max_new_tokens: a completion's
    tokens, or in an episode its longest policy turn (each turn is one generation capped at
    max_new_tokens; inserted messages are not the policy's, and the number of turns is the
    episode's to decide, so a sum over turns would penalise an episode for taking more of them)."""
    if batch.policy_mask is None:
        return batch.completion_mask.sum(1)
    return longest_run(batch.completion_mask * batch.policy_mask)


ESTIMATOR_SETTINGS: dict[str, Callable] = {"dbb": dbb_options}
"""By algo.advantage: the builder of the settings record that estimator reads (`EstimatorContext.settings`)
from the config; an estimator not named here has none."""


def estimator_settings(cfg):
    """The chosen estimator's own settings record (`dbb_options` for dbb), None for the others."""
    build = ESTIMATOR_SETTINGS.get(cfg.algo.advantage)
    return None if build is None else build(cfg)


def advantages_for(batch: RolloutBatch, cfg, context: EstimatorContext | None = None) -> torch.Tensor:
    """Shaped rewards -> per-sequence advantages (N, 1) by the estimator `algo.advantage`.

    `context` (prompt ids, step, per-prompt statistics) is handed to stateful estimators (dbb reads
    and updates its posteriors there: call once per batch), with the batch's collect-strategy bonus
    and the estimator's settings added; None: the batch's prompts at step 0, no statistics."""
    algo, sizes = cfg.algo, batch.group_sizes
    rewards = batch.rewards.clone()
    if algo.overlong_buffer > 0:
        lengths = overlong_lengths(batch)
        shaped = overlong_penalty(lengths, cfg.rollout.max_new_tokens, algo.overlong_buffer, algo.overlong_factor)
        if sizes is None:
            rewards = rewards + shaped.view_as(rewards)
        else:
            rewards = rewards + pad_groups(list(torch.split(shaped, sizes)))[0].nan_to_num(0.0)
    if cfg.sample_efficiency.dbb.enabled and algo.advantage != "dbb":  # not silently another estimator
        raise ValueError(f"sample_efficiency.dbb.enabled with algo.advantage={algo.advantage!r}: the config is not "
                         "resolved (mmrlvr.algos.presets.resolve_config makes algo.advantage dbb)")
    context = context if context is not None else EstimatorContext(batch.sample_ids, 0)
    context = dataclasses.replace(context, bonus=batch.bonus, settings=estimator_settings(cfg))
    per_group = estimate(algo.advantage, rewards, context)
    return flatten_groups(per_group, sizes).reshape(-1, 1)
