"""HiLL's step (`rollout.episode: hill`): hints for all-incorrect groups, re-rollouts, hint rewards.

HiLL's `collect` hook (called by `mmrlvr.recipe.step.collect`), as the authors' trainer runs one step
(Andree-9/HiLL at 195d94e, `verl/trainer/ppo/hill_ray_trainer.py` "HT", `hinter_utils.py` "HU"):
1. the round's groups whose every reward is <= 0.5 are hard (HT:424-447); with fewer than
   `min_hard_prompts` of them nothing happens (HT:464, 960-962);
2. per hard prompt, one of its failed answers drawn uniformly (HT:268-274) goes into the hinter's
   prompt, which the policy answers `num_hints` (M) times;
3. gates per hint, in order (HT:533-570): `<hint>` block, leak of the gold answer, hinted prompt
   length; each passing hint's prompt (question + blank line + hint) is answered G times by the
   policy (HT:604-686) and scored by the run's reward;
4. reliance of each re-rollout under the current policy, without and with the hint (HT:721-789);
   the hint's reward (`mmrlvr.methods.hill.maths.hint_reward`); if no hint of the whole round passed
   its gates every hint scores 0, not the penalty (HT:824-827 leave the rewards empty, HT:1114);
5. which rows are trained: a hard group is replaced by its best hint's G re-rollouts, trained
   with the hint in their prompt and no correction towards the hint-free policy, iff that hint's
   group is mixed (HU:437-444, HT:808-817, HU:464-521); otherwise the original all-incorrect group
   stays (zero advantage; groups are not filtered, HT:968-975). The hinter's M answers per hard
   prompt, gate failures included, are a group of their own with the hint rewards (HT:1096-1190).

Ours: one policy plays both roles and one update trains both kinds of rows (HiLL updates the
reasoner, then a second model, the hinter, each with its own optimizer).
"""

from __future__ import annotations

import dataclasses
import random
import time

import torch

from mmrlvr.data.collate import encode_prompts, repeat_prompts, select_rows
from mmrlvr.methods.hill.episode import HillSettings, gold_answer, hinted_sample, hinter_sample, settings_of
from mmrlvr.methods.hill.maths import (GATE_FAILURE_PENALTY, POSITIVE_THRESHOLD, best_hint, hint_reward, leaks_answer,
                                       mean_reliance, parse_hint, sequence_mean_logprob)
from mmrlvr.train.distributed import rank_world
from mmrlvr.train.logprobs import completion_logprobs
from mmrlvr.train.rewards import score_completions
from mmrlvr.types import Group, Verdict


def hard_groups(rewards: torch.Tensor, threshold: float = POSITIVE_THRESHOLD) -> list[int]:
    """(B, G) rewards -> the groups with no reward above the threshold (NaN, unscorable, counts as not correct)."""
    return [b for b in range(rewards.shape[0]) if not bool((rewards[b] > threshold).any())]


def gate(text: str, sample, settings: HillSettings, prompt_tokens) -> tuple[str | None, str]:
    """(hint, "ok") or (hint or None, why it failed: "parse", "leak", "overlong"), in HiLL's order (HT:533-570).
    `prompt_tokens(sample) -> int`: the hinted prompt's length in tokens."""
    hint = parse_hint(text) if settings.hint_tags else (text.strip() or None)
    if hint is None:
        return None, "parse"
    if leaks_answer(hint, gold_answer(sample)):
        return hint, "leak"
    if prompt_tokens(hinted_sample(sample, hint, 0)) > settings.max_hinted_prompt_tokens:
        return hint, "overlong"
    return hint, "ok"


@torch.no_grad()
def reliance(engine, cfg, original, hinted_inputs: dict, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(G,) mean log-prob of each re-rollout without the hint minus with it, under the current policy
    at the learner's temperature (HT:742-782: the same response tokens after the original prompt)."""
    g = ids.shape[0]
    t = max(1, int(mask.sum(1).max()))
    ids, mask = ids[:, :t], mask[:, :t]
    kw = dict(temperature=cfg.rollout.temperature, suppress_ids=engine.suppress_ids)
    with_hint = completion_logprobs(engine.model, repeat_prompts(hinted_inputs, g), ids, mask, **kw)[0]
    plain = repeat_prompts(encode_prompts(engine.processor, [original]), g)
    without = completion_logprobs(engine.model, plain, ids, mask, **kw)[0]
    return (sequence_mean_logprob(without.float(), mask) - sequence_mean_logprob(with_hint.float(), mask)).cpu()


def _group(out, rows: range, sample, rewards: torch.Tensor, verdicts: list) -> Group:
    comps = [out.completions[i] for i in rows]
    lps = [out.sampler_logprobs[i, : len(c.token_ids)] if out.sampler_logprobs is not None else None
           for i, c in zip(rows, comps)]
    return Group(sample, comps, rewards, verdicts, lps)


def _prompt_tokens(processor):
    return lambda sample: int(encode_prompts(processor, [sample])["attention_mask"].sum())


def _write_hints(rnd, ctx, s: HillSettings, hard: list[int]) -> tuple[list, object, list]:
    """Steps 1-3: per hard prompt one of its failed answers, drawn with the round's seed, goes into
    the hinter's prompt; the policy writes `num_hints` hints for it; each hint meets HiLL's gates.
    (hinter samples, their rollout, per hard prompt [(hint, gate status)] in hint order)."""
    cfg, g, m = ctx.cfg, rnd.rewards.shape[1], s.num_hints
    rng = random.Random(ctx.seed * 1009 + rnd.index)
    hinters = [hinter_sample(rnd.prompts[k], rnd.out.completions[k * g + rng.randrange(g)].text, s.hinter_template)
               for k in hard]
    hout = ctx.engine.rollout(hinters, m, cfg.rollout, seed=ctx.seed * 1000 + 700 + rnd.index, return_logprobs=True,
                              max_new_tokens=s.hinter_max_new_tokens or cfg.rollout.max_new_tokens)
    count = _prompt_tokens(ctx.engine.processor)
    gates = [[gate(hout.completions[i * m + j].text, rnd.prompts[k], s, count) for j in range(m)]
             for i, k in enumerate(hard)]
    return hinters, hout, gates


def _answer_hinted(rnd, ctx, hard: list[int], passing: list, hinted: list) -> tuple[dict, object, list | None]:
    """Step 4: each passing hint's prompt answered G times, scored by the run's reward, and the
    answers' reliance on the hint. ({(i, j): (G rewards, mean reliance, index in `hinted`)}, the
    rollout, its verdicts); no hint passed: ({}, None, None), nothing generated."""
    rewards: dict = {}  # (i, j) -> (G,) rewards of hint j of hard prompt i
    if not hinted:
        return rewards, None, None
    cfg, g = ctx.cfg, rnd.rewards.shape[1]
    rout = ctx.engine.rollout(hinted, g, cfg.rollout, seed=ctx.seed * 1000 + 800 + rnd.index, return_logprobs=True)
    rr, _, rv = score_completions(rout.completions, hinted, g, cfg.rewards, ctx.scorer)
    for p, key in enumerate(passing):
        rows = slice(p * g, (p + 1) * g)
        delta = reliance(ctx.engine, cfg, rnd.prompts[hard[key[0]]], select_rows(rout.prompt_inputs, [p]),
                         rout.completion_ids[rows], rout.completion_mask[rows])
        rewards[key] = (rr[p], mean_reliance(delta, rr[p]), p)
    return rewards, rout, rv


def _choose_hints(hard: list[int], s: HillSettings, rewards: dict, hinted: list, rout, rv, g: int) -> tuple:
    """Step 5: every hint's reward (a failed gate scores the penalty, or 0 when no hint of the round
    passed), and the hard groups that the re-rollouts of their best hint replace.
    ([per hard prompt, the M hint rewards], {group: replacement}, the chosen hints' reliances)."""
    hint_rewards, replaced, chosen_reliance = [], {}, []
    for i, k in enumerate(hard):
        scored = [hint_reward(rewards[(i, j)][0], True, s.reward_type, rewards[(i, j)][1], s.transfer_temperature)
                  if (i, j) in rewards else (GATE_FAILURE_PENALTY if hinted else 0.0, 0.0) for j in range(s.num_hints)]
        hint_rewards.append([r for r, _ in scored])
        best = best_hint([r for r, _ in scored], [pt for _, pt in scored])
        if best is not None:
            r, rel, p = rewards[(i, best)]
            replaced[k] = _group(rout, range(p * g, (p + 1) * g), hinted[p], r, rv[p * g:(p + 1) * g])
            if rel is not None:
                chosen_reliance.append(rel)
    return hint_rewards, replaced, chosen_reliance


def _round_metrics(gates: list, hint_rewards: list, rewards: dict, replaced: dict, hinted: list, b: int,
                   g: int) -> dict:
    """The hinter's mean reward, the share of hints each gate stopped, how the hinted prompts were
    answered and how many groups they replaced, and all rows generated this round."""
    statuses = [st for row in gates for _, st in row]
    n_hints = len(statuses)
    return {
        "reward/hinter/mean": sum(sum(x) for x in hint_rewards) / n_hints,
        "hill/gate_pass_frac": statuses.count("ok") / n_hints,
        "hill/parse_fail_frac": statuses.count("parse") / n_hints,
        "hill/leak_frac": statuses.count("leak") / n_hints,
        "hill/overlong_frac": statuses.count("overlong") / n_hints,
        "hill/hinted_pass_rate": (sum(float((v[0] > POSITIVE_THRESHOLD).float().mean()) for v in rewards.values())
                                  / len(rewards)) if rewards else 0.0,
        "hill/replaced_frac": len(replaced) / b,
        "hill/generated": b * g + n_hints + len(hinted) * g,
    }


def hill_hints(rnd, ctx):
    """The collect strategy: a no-op unless `rollout.episode` is hill (see the module docstring)."""
    cfg = ctx.cfg
    if getattr(cfg.rollout, "episode", "single") != "hill":
        return rnd
    if rank_world()[1] > 1:
        raise ValueError("rollout.episode=hill: runs in one process for now (its hint rounds are per rank)")
    s = settings_of(cfg.rollout.episode_args)
    b, g = rnd.rewards.shape
    own = rnd.rewards if rnd.bonus is None else rnd.rewards - rnd.bonus
    hard = hard_groups(own)
    metrics = {"reward/reasoner/mean": own.nanmean().item(), "hill/hard_frac": len(hard) / max(b, 1),
               "hill/generated": b * g}
    if not hard or len(hard) < s.min_hard_prompts:
        return dataclasses.replace(rnd, metrics={**rnd.metrics, **metrics})
    t0 = time.perf_counter()
    m = s.num_hints
    hinters, hout, gates = _write_hints(rnd, ctx, s, hard)
    passing = [(i, j) for i in range(len(hard)) for j in range(m) if gates[i][j][1] == "ok"]
    hinted = [hinted_sample(rnd.prompts[hard[i]], gates[i][j][0], j) for i, j in passing]
    rewards, rout, rv = _answer_hinted(rnd, ctx, hard, passing, hinted)
    hint_rewards, replaced, chosen_reliance = _choose_hints(hard, s, rewards, hinted, rout, rv, g)
    derived = [_group(hout, range(i * m, (i + 1) * m), hinters[i], torch.tensor(hint_rewards[i]),
                      [Verdict(max(0.0, x), reason=f"hint {gates[i][j][1]}") for j, x in enumerate(hint_rewards[i])])
               for i in range(len(hard))]
    metrics.update(_round_metrics(gates, hint_rewards, rewards, replaced, hinted, b, g))
    if chosen_reliance:
        metrics["hill/reliance_mean"] = sum(chosen_reliance) / len(chosen_reliance)
    return dataclasses.replace(rnd, replaced={**rnd.replaced, **replaced}, derived_groups=[*rnd.derived_groups, *derived],
                               metrics={**rnd.metrics, **metrics}, gen_s=rnd.gen_s + time.perf_counter() - t0)
