"""The RL loop: sample -> generate -> score -> advantages -> update -> log -> checkpoint.

One function that reads top to bottom. It names no method: the active methods' hooks
(`mmrlvr.methods`) run at fixed points (launch, prompt source, token weigher, run-time state,
generation and collect steps inside `collect`, the estimator's settings, sync after the
advantages, files on logged steps), and each method's state is saved under its name.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Iterable

import torch

from mmrlvr.algos.advantages import EstimatorContext, pad_groups
from mmrlvr.checks.resolve import resolve_config
from mmrlvr.config import Config, save_config
from mmrlvr.data.bad_rows import BadRows, max_bad_frac_setting
from mmrlvr.data.feed import MediaStream
from mmrlvr.data.io import TaskSamples
from mmrlvr.data.prompts import prompt_text
from mmrlvr.data.sources import SeededStream
from mmrlvr.methods import hooks
from mmrlvr.rollout.factory import make_engine
from mmrlvr.rollout.lagged import LaggedEngine, Lookahead
from mmrlvr.train.checkpoint import (latest_checkpoint, remove_partial_saves, load_trainer_state,
                                     save_checkpoint, write_final_model)
from mmrlvr.train.distributed import (all_reduce, barrier, freeze_unreachable, gather_lists, rank_world,
                                      reduce_metrics, remember_dummy_media, shard)
from mmrlvr.train.evaluate import eval_metrics, eval_terms, said
from mmrlvr.train.metrics import MetricsWriter
from mmrlvr.train.precision import MasterWeights, compute_dtype, engine_masters
from mmrlvr.train.progress import Progress
from mmrlvr.train.run_dir import claim_run_dir, release_lock
from mmrlvr.train.run_dir_paths import clear_run_dir
from mmrlvr.train.schedule import make_scheduler
from mmrlvr.train.setup import prepare_policy, reference_policy, set_threads_and_seed, sharded_launch, start_trackers
from mmrlvr.train.learner import Learner
from mmrlvr.recipe.run import Run
from mmrlvr.recipe.run_state import RunState
from mmrlvr.recipe.step import advantages_for, collect, local_prompts, round_seed
from mmrlvr.train.preflight import check_settings, cpu_fallback_note, load_splits
from mmrlvr.checks.notes import config_warnings
from mmrlvr.verifiers.failures import BrokenRewardError
from mmrlvr.verifiers.score import make_scorer


def train(cfg: Config) -> dict:
    """Run warm start (if configured), RL and the before/after evaluations; return the summary."""
    check_settings(cfg)  # every bad setting, a missing device, a run dir it may not clear: before anything heavy
    # the notes read the config as written (resolving makes two switches of one method agree, and hides a conflict)
    notes = [*config_warnings(cfg), *filter(None, [cpu_fallback_note(cfg)])]
    run = open_run(resolve_config(cfg), notes=notes)  # the one config read from here on
    try:
        for step in range(run.state.step + 1, run.cfg.train.steps + 1):
            metrics = rl_step(run, step)
            if run.cfg.train.eval_every and step % run.cfg.train.eval_every == 0 and step != run.cfg.train.steps:
                metrics.update(eval_metrics(run.cfg.task.name, run.evaluate()))
            run.log.log(step, metrics)
            run.progress.update(step, metrics)
            _checkpoint(run, step)
        return _finish(run)
    finally:
        run.close()  # also when a step fails: no decode thread or verifier process outlives the run


def open_run(cfg: Config, notes: Iterable[str] | None = None) -> Run:
    """Everything the steps share: the run directory (fresh, or the checkpoint to resume), the
    data, the policy with its learner and engine, the scorer, the writers, the held-out score
    before RL (once per run: a resume keeps the saved one). `notes`: the warning lines to print
    (None: those of `cfg`)."""
    t_start = time.perf_counter()
    run_dir = Path(cfg.output_dir)
    accelerator = set_threads_and_seed(cfg, log_with=cfg.train.log_with)
    cfg = hooks.launch(cfg, accelerator)  # each method's say on this launch, before the model loads
    is_main = accelerator.is_main_process  # only rank 0 writes the run directory
    notes = config_warnings(cfg) if notes is None else notes
    for note in notes if is_main else ():  # valid, but not doing what it looks like
        print(f"mmrlvr: warning: {note}", file=sys.stderr)
    claim_run_dir(run_dir, cfg, is_main)  # a lock naming this PID; a resume must match the saved config
    ckpt = _open_run_dir(cfg, run_dir, is_main)
    # on resume, tensorboard hides what a killed run logged after the checkpoint (as metrics.jsonl drops it)
    start_trackers(accelerator, cfg, run_dir,
                   purge_step=(int(ckpt.name.split("_")[1]) + 1 if ckpt is not None else 0) if cfg.train.resume else None)
    log = MetricsWriter(run_dir, accelerator, enabled=is_main)
    progress = Progress(cfg.train.steps, enabled=is_main, log_every=cfg.train.log_every)

    # Data and model; resume from the newest checkpoint, or warm-start a fresh policy.
    bad_limit = max_bad_frac_setting(cfg.task)[0]  # rows bad at load or at decode, one limit
    train_set, eval_set, plugins = load_splits(cfg)  # only the config may name code to run
    progress.held_out_rows = isinstance(eval_set, TaskSamples)  # rows of a file, not a synthetic draw
    with accelerator.main_process_first():  # rank 0 warm-starts and saves; the others load that
        model, processor, warm = prepare_policy(cfg, ckpt, train_set, run_dir, progress)
    masters = _placed(cfg, accelerator, model, processor, progress)
    learner, engine = _learner_and_engine(cfg, accelerator, model, processor, ckpt is not None, run_dir, masters)
    state = RunState(warm_start=warm)
    if ckpt is not None:
        state = RunState.from_dict(load_trainer_state(ckpt, learner.optimizer, learner.scheduler))
        progress.note(f"resumed from {ckpt} (step {state.step})")
    log.truncate_after(state.step if ckpt is not None else None)  # lines of a killed run are redone
    # batches arrive decoded (a background thread decodes the next one); bad media are dropped
    source = MediaStream(prompt_source(train_set, cfg), processor=processor, bad_rows=BadRows.of(train_set, bad_limit))
    if state.source:
        source.load_state_dict(state.source)
    if cfg.rollout.async_steps:  # step t+1's prompts are drawn during step t (mmrlvr.rollout.lagged)
        source = Lookahead(source)
    run = Run(cfg, run_dir, accelerator, processor, learner, engine, source,
              make_scorer(cfg.verifier_timeout, cfg.verifier_workers, plugins), state, log, progress, eval_set,
              eval_terms(cfg.rewards, cfg.eval.verifiers), bad_limit,
              methods=hooks.Live.start(cfg, state.methods),  # each method's state, as the checkpoint left it
              t_start=t_start)
    if state.eval_before is None:
        before = run.evaluate()
        state.eval_before = {k: v for k, v in before.items() if k != "examples"}
        log.log(0, eval_metrics(cfg.task.name, before))
        progress.note(f"held-out {said(before.get('headline', 'accuracy'))} before RL: {state.eval_before['accuracy']:.3f}")
    learner.model.train()  # the engine switches to eval for sampling and back
    return run


def _placed(cfg: Config, accelerator, model, processor, progress) -> MasterWeights | None:
    """Put the policy on its device with what one process / DDP needs before the optimizer sees
    it; return its float32 master weights (None where FSDP2 / DeepSpeed hold their own)."""
    # a bf16 model computes in bf16 from here on; AdamW steps the float32 masters
    masters = None if engine_masters(accelerator) else MasterWeights(model.to(accelerator.device),
                                                                    compute_dtype(cfg.model.dtype))
    if not sharded_launch(accelerator):  # before the optimizer and DDP see them (freeze_unreachable)
        frozen = freeze_unreachable(model.to(accelerator.device), processor)
        if frozen:
            progress.note(f"frozen {len(frozen)} media parameter(s) no forward reaches (DDP would wait for "
                          f"their gradients): {', '.join(frozen[:4])}{' ...' if len(frozen) > 4 else ''}")
    if rank_world()[1] > 1:  # a rank whose micro-batch has no media runs its vision tower on a blank image
        remember_dummy_media(model, processor)
    return masters


def _checkpoint(run: Run, step: int) -> None:
    """Record where the run is; save it (atomic, with the run state so a resume continues exactly)
    every `train.save_every` steps and at the last."""
    state, train_cfg = run.state, run.cfg.train
    state.step, state.source = step, run.source.state_dict()
    state.methods = run.methods.state_dicts()
    if (train_cfg.save_every and step % train_cfg.save_every == 0) or step == train_cfg.steps:
        learner = run.learner
        save_checkpoint(run.run_dir, step, learner.policy, run.processor, learner.optimizer, state.to_dict(),
                        scheduler=learner.scheduler, accelerator=run.accelerator,
                        wrapped=learner.model, masters=learner.masters)  # every rank: a collective


def _finish(run: Run) -> dict:
    """The final policy for serving, the held-out score after RL, the summary."""
    cfg, run_dir = run.cfg, run.run_dir
    run.source.close()
    if run.write:  # the final policy in model.dtype for serving; checkpoints/ keeps the float32 masters
        write_final_model(latest_checkpoint(run_dir), run_dir / "model", cfg.model)
    eval_after = run.evaluate()
    run.log.log(cfg.train.steps, eval_metrics(cfg.task.name, eval_after))
    barrier()  # rank 0 has written every metrics line before anyone reads them back
    summary = _summary(cfg, run.state, eval_after, run_dir, time.perf_counter() - run.t_start)
    if run.write:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    run.progress.close(summary)
    run.log.close()
    if run.write:
        release_lock(run_dir)
    return summary


def prompt_source(train_set, cfg: Config):
    """The RL prompts: the seeded stream, as the active methods' `source` hooks leave it (replaced,
    or wrapped; never for evaluation, which reads eval_set)."""
    return hooks.source(cfg, train_set, SeededStream(train_set, cfg.seed))


def _open_run_dir(cfg: Config, run_dir: Path, is_main: bool):
    """Clear (fresh run: only what an earlier run of ours wrote) or keep (resume) the run directory,
    write the resolved config; the checkpoint to resume from, or None."""
    if is_main:
        if not cfg.train.resume:
            clear_run_dir(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_saves(run_dir)  # a kill during a save leaves .tmp-* directories
        save_config(cfg, run_dir / "config.yaml")
    barrier()
    return latest_checkpoint(run_dir) if cfg.train.resume else None


def _learner_and_engine(cfg: Config, accelerator, model, processor, resumed: bool, run_dir: Path,
                        masters: MasterWeights | None = None):
    """The learner (policy, reference, optimizer, schedule) and the engine sampling from it.
    `masters`: the float32 master weights AdamW steps (one process / DDP with a bf16 model)."""
    model.to(accelerator.device)
    # the KL reference is the policy RL started from, also after a resume (None with LoRA: the
    # base model with the adapter switched off)
    ref_model = reference_policy(cfg, cfg.algo, model, resumed, run_dir)
    if ref_model is not None:
        ref_model.to(accelerator.device)
    if masters is not None and len(masters):
        params = masters.params()  # float32, with float32 moments; the model's bf16 copies are rounded from them
    else:
        params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    scheduler = make_scheduler(optimizer, cfg.train)  # stepped once per RL step, like verl
    engine = make_engine(cfg, accelerator.unwrap_model(model), processor)
    if cfg.rollout.async_steps:
        engine = LaggedEngine(engine)
    weighs = hooks.only(cfg, "weights")  # per-token weights the learner scales advantages with (None: all 1)
    weigher = None if weighs is None else weighs.weights(cfg, engine, processor)
    learner = Learner(cfg, model, optimizer, accelerator, engine.suppress_ids, scheduler=scheduler, ref_model=ref_model,
                      masters=masters if masters is not None and len(masters) else None, weigher=weigher)
    return learner, engine


def stop_scoring_if_broken(scorer, stop_share: float | None) -> None:
    """Raise `BrokenRewardError` (on every rank, if any rank's reward broke) with the one line."""
    why = scorer.failures.end_step(stop_share)
    if float(all_reduce([1.0 if why else 0.0], "max")[0]) > 0:
        raise BrokenRewardError(why or "a reward term failed on another rank (its error is in that rank's output)")


def rl_step(run: Run, step: int) -> dict:
    """One RL step: collect, advantages, token weights, update, weight sync; returns its metrics."""
    cfg, learner, engine, source, state = run.cfg, run.learner, run.engine, run.source, run.state
    t0 = time.perf_counter()
    # 1-3. sample prompts, generate G completions each, score them, run the collect strategies
    run.scorer.failures.begin_step()  # an evaluation since the last step scored items that are not this step's
    batch = collect(engine, source, run.scorer, cfg, seed=cfg.seed * 100_003 + step, step=step,  # `_generate_ahead`'s seed
                    generator=run.methods.generator(), states=run.methods.states)
    stop_scoring_if_broken(run.scorer, cfg.verifier_stop_share)  # before a step trains on a broken reward's zeros
    log_step = step % cfg.train.log_every == 0 or step == 1
    # 4. advantages (stateful estimators read the per-prompt statistics before this step's
    # rewards), then the statistics and the source learn every group scored (all ranks', also
    # the groups dynamic sampling dropped)
    adv = advantages_for(batch, cfg, EstimatorContext(batch.sample_ids, step, state.prompt_stats))
    run.methods.sync(state.prompt_stats, batch.sample_ids)  # what each rank's methods learned, on every rank
    scored = gather_lists(batch.scored or list(zip(batch.sample_ids, batch.rewards.tolist())))
    ids, rows = [i for i, _ in scored], [r for _, r in scored]
    state.prompt_stats.update(step, ids, rows)
    source.feedback(step, ids, pad_groups([torch.tensor(r) for r in rows])[0] if rows else torch.zeros(0, 0))
    if cfg.rollout.async_steps and step < cfg.train.steps:  # step t+1 generates while step t trains
        _generate_ahead(run, step + 1)
    # 5. token weights (perception / reasoning signals, once for the whole batch; diagnostics on
    # logged steps) and the policy update (ppo_epochs x mini_batches optimizer steps, then the LR
    # schedule): the learner's weigher decides whether the signals take their own forwards or
    # the update's
    stats, tw = learner.weigh_and_update(batch, adv, step=step, diagnose=log_step and run.write)
    staleness = engine.synced_version - batch.policy_version if batch.policy_version is not None else None
    engine.sync_weights(learner.policy)
    metrics = reduce_metrics({  # each rank's shard -> the global batch (identity in one process)
        **batch.metrics, **stats, **(tw.metrics if tw is not None else {}),
        "reward/mean": batch.rewards.nanmean().item(),
        "time/step": time.perf_counter() - t0,
        "data/bad_media": source.pop_bad(),
        **source.metrics(),  # what the prompt source reports (a method's source: its own keys)
        **({"rollout/staleness": staleness} if staleness is not None else {}),
    })
    if run.write and log_step:
        _write_samples(run.run_dir, step, batch)
        run.methods.record(run.run_dir, step, batch, adv, tw, run.tokenizer, cfg)
    return metrics


def _generate_ahead(run: Run, step: int) -> None:
    """Start step `step`'s first round on the server with the weights it has now: the prompts and
    seed that `collect` will ask for at that step (`rollout.async_steps: 1`)."""
    cfg = run.cfg
    rank, world = rank_world()
    need = local_prompts(cfg.rollout.prompts_per_step, world)
    prompts = shard(run.source.peek(need * world, step), rank, world)
    run.engine.generate_ahead(prompts, cfg.rollout.group_size, cfg.rollout, round_seed(cfg.seed * 100_003 + step, 0))


def _write_samples(run_dir: Path, step: int, batch, k: int = 8) -> None:
    """A few completions with their verdicts, for a person to read: up to k // (prompts) from each
    of the first k // 2 prompts, so both the spread across prompts and within a group are visible.
    Groups may differ in size (a method may add or replace groups; episodes): rows are found by `row_groups`."""
    out = run_dir / "samples"
    out.mkdir(exist_ok=True)
    prompts = min(len(batch.samples), max(1, k // 2))
    per = max(1, k // max(prompts, 1))
    where = batch.row_groups()
    with open(out / f"step_{step}.jsonl", "w") as f:
        for i, (b, j) in enumerate(where):
            if b >= prompts or j >= per:
                continue
            s, verdict = batch.samples[b], batch.verdicts[i]
            row = {"id": s.id, "prompt": b, "prompt_text": prompt_text(s), "reference": s.reference, "completion": batch.texts[i],
                   "score": verdict.score, "reason": verdict.reason, "reward": batch.rewards[b, j].item()}
            f.write(json.dumps(row, default=str) + "\n")


def _summary(cfg: Config, state: RunState, eval_after: dict, run_dir: Path, seconds: float) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    k = max(1, min(10, len(rewards) // 4))
    before, after = state.eval_before, {k2: v for k2, v in eval_after.items() if k2 != "examples"}
    return {
        "eval_before": before,
        "eval_after": after,
        "accuracy_gain": after["accuracy"] - before["accuracy"],
        "headline": after.get("headline", "accuracy"),  # what accuracy measures: accuracy, mean_iou, reward, ...
        "reward_first": sum(rewards[:k]) / k if rewards else None,
        "reward_last": sum(rewards[-k:]) / k if rewards else None,
        "steps": cfg.train.steps,
        "seed": cfg.seed,
        "algorithm": cfg.algo.algorithm,
        "warm_start": state.warm_start,
        "wall_time_s": round(seconds, 1),
        "run_dir": str(run_dir),
        "model_dir": str(run_dir / "model"),  # the final policy in model.dtype, for serving
    }
