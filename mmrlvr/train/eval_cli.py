"""`mmrlvr eval`: greedy accuracy of a saved model on a task split."""

from __future__ import annotations

import dataclasses

from mmrlvr.config import Config
from mmrlvr.models.load import load_policy
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.train.evaluate import evaluate
from mmrlvr.train.setup import set_threads_and_seed
from mmrlvr.validate import check_sample_verifiers, validate_config
from mmrlvr.verifiers.score import make_scorer
from mmrlvr.tasks import load_task


def run_eval(cfg: Config, checkpoint: str, split: str = "eval") -> dict:
    validate_config(cfg)
    accelerator = set_threads_and_seed(cfg)
    size = cfg.task.eval_size if split == "eval" else cfg.task.train_size
    samples = load_task(cfg.task.name, split, size, cfg.seed, **cfg.task.args)
    plugins = [t.verifier for t in cfg.rewards]
    check_sample_verifiers(samples, plugins)
    model, processor = load_policy(dataclasses.replace(cfg.model, path=checkpoint, lora_rank=0))
    model.to(accelerator.device)
    engine = HFRolloutEngine(model, processor)
    scorer = make_scorer(cfg.verifier_timeout, cfg.verifier_workers, plugins)
    try:
        result = evaluate(engine, samples, scorer, cfg.rollout, cfg.eval.batch_size,
                          cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens)
    finally:
        scorer.close()
    return {"checkpoint": checkpoint, "split": split, **result}
