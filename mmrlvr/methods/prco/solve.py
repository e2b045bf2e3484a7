"""PRCO's collect step: the Solver answers each Observer caption, and both roles get their rewards.

`solve_captions` runs after the round's captions were scored (PRCO's `collect` hook, called by
`mmrlvr.recipe.step.collect`); what it computes and which parts are our reading:
`mmrlvr.methods.prco.episode` and `mmrlvr.methods.prco.maths`.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from mmrlvr.methods.prco.episode import options, solver_sample
from mmrlvr.methods.prco.maths import leaked, utility_rewards
from mmrlvr.train.distributed import rank_seed, rank_world
from mmrlvr.train.rewards import score_completions
from mmrlvr.types import Group


def solve_captions(rnd, ctx):
    """Collect strategy: K Solver answers per caption -> Observer rewards (B, G) in `rnd.rewards` and
    one extra group per caption (its K answers, their rewards; NaN where the caption leaked)."""
    opts = options(ctx.cfg.rollout.episode_args)
    k = opts.solver_answers
    b, g = rnd.rewards.shape
    comps = rnd.out.completions
    captions = [c.text.strip() for c in comps]
    image = ctx.step >= opts.solver_image_after
    solvers = [solver_sample(rnd.prompts[c.sample_index], cap, opts, image) for c, cap in zip(comps, captions)]
    t0 = time.perf_counter()
    out = ctx.engine.rollout(solvers, k, ctx.cfg.rollout, seed=rank_seed(ctx.seed * 1000 + 700 + rnd.index, *rank_world()),
                             return_logprobs=True)
    gen_s = time.perf_counter() - t0
    rewards, metrics, verdicts = score_completions(out.completions, solvers, k, ctx.cfg.rewards, ctx.scorer)
    scores = torch.tensor([v.score for v in rnd.verdicts], dtype=torch.float32)
    leak = leaked(captions, [s.reference for s in solvers], scores, opts.leak_gate)
    utility = utility_rewards(rewards, leak, opts.leak_reward)
    lp = out.sampler_logprobs
    extra = []
    for j, s in enumerate(solvers):
        rows = out.completions[j * k: (j + 1) * k]
        lps = [lp[j * k + i, : len(c.token_ids)] if lp is not None else None for i, c in enumerate(rows)]
        r = torch.full((k,), float("nan")) if leak[j] else rewards[j]
        extra.append(Group(s, rows, r, verdicts[j * k: (j + 1) * k], lps))
    metrics = {**{k: v for k, v in rnd.metrics.items() if not k.startswith("reward/")},
               **role_terms(rnd.metrics, metrics),
               **role_metrics(utility, rewards, leak)}
    return dataclasses.replace(rnd, rewards=utility.view(b, g), extra_groups=[*rnd.extra_groups, *extra],
                               metrics=metrics, gen_s=rnd.gen_s + gen_s)


def role_terms(caption_metrics: dict, solver_metrics: dict) -> dict:
    """reward/<verifier>[/<part>] of the two scorings, by role: the captions scored as answers (what
    the leak gate reads) under reward/observer/as_answer/, the Solver's answers under reward/solver/."""
    out = {}
    for key, value in caption_metrics.items():
        if key.startswith("reward/"):
            name, _, part = key[len("reward/"):].partition("/")
            out[f"reward/observer/as_answer/{name}/{part}" if part else f"reward/observer/as_answer/{name}"] = value
    for key, value in solver_metrics.items():
        if key.startswith("reward/"):
            name, _, part = key[len("reward/"):].partition("/")
            out[f"reward/solver/{name}/{part}" if part else f"reward/solver/{name}"] = value
    return out


def _nanmean(x: torch.Tensor) -> float:
    x = x[~torch.isnan(x)]
    return x.mean().item() if x.numel() else float("nan")


def role_metrics(utility: torch.Tensor, solver_rewards: torch.Tensor, leak: torch.Tensor) -> dict:
    """reward/observer/mean (the Observer's gated reward), reward/observer/leak_frac, reward/observer/
    utility (before the gate), reward/solver/mean (the answers trained: to captions that did not leak)."""
    raw = utility_rewards(solver_rewards, torch.zeros_like(leak))
    return {"reward/observer/mean": _nanmean(utility), "reward/observer/leak_frac": leak.float().mean().item(),
            "reward/observer/utility": _nanmean(raw), "reward/solver/mean": _nanmean(solver_rewards[~leak])}
