"""`mmrlvr eval CONFIG [overrides] --checkpoint DIR [--samples K] [--out FILE]`: a JSON report.

The checkpoint is a saved model directory (full or LoRA adapter), a hub name, or "tiny" (the
embedded default, untrained). It is scored with the same terms as the training-time evaluation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mmrlvr.config import Config, ConfigError
from mmrlvr.data.bad_rows import max_bad_frac_setting
from mmrlvr.data.heldout import is_generated, small_split_note
from mmrlvr.models.load import checkpoint_path, load_checkpoint
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.methods.hooks import METHODS
from mmrlvr.train.evaluate import eval_terms, evaluate
from mmrlvr.train.setup import set_threads_and_seed, task_args
from mmrlvr.checks.validate import check_sample_verifiers, validate_config
from mmrlvr.checks.notes import config_warnings
from mmrlvr.verifiers.score import make_scorer
from mmrlvr.tasks import load_task


def run_eval(cfg: Config, checkpoint: str, split: str = "eval", samples: int = 1) -> dict:
    """Evaluate `checkpoint` on the task's split; the report's fields are listed in docs/how-to/evaluation.md."""
    validate_config(cfg, loads_model_path=False)  # the checkpoint is loaded, not model.path
    for note in config_warnings(cfg):  # valid, but deprecated or not doing what it looks like
        print(f"mmrlvr: warning: {note}", file=sys.stderr)
    checkpoint = checkpoint_path(checkpoint)  # a missing directory fails here, before any loading
    rankers = eval_rankers(cfg, checkpoint, samples)  # before the model loads: what a method needs must be there
    accelerator = set_threads_and_seed(cfg)
    size = cfg.task.eval_size if split == "eval" else cfg.task.train_size
    rows = load_task(cfg.task.name, split, size, cfg.seed, **task_args(cfg))
    plugins = [t.verifier for t in cfg.rewards] + list(cfg.eval.verifiers)  # only the config names code
    check_sample_verifiers(rows, plugins)
    model, processor = load_checkpoint(checkpoint, cfg.model)
    model.to(accelerator.device)
    engine = HFRolloutEngine(model, processor)
    scorer = make_scorer(cfg.verifier_timeout, cfg.verifier_workers, plugins)
    terms = eval_terms(cfg.rewards, cfg.eval.verifiers)
    try:
        result = evaluate(engine, rows, scorer, cfg.rollout, cfg.eval.batch_size,
                          cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens, terms=terms, k=samples,
                          seed=cfg.seed, max_bad_frac=max_bad_frac_setting(cfg.task)[0])
        if rankers and result["n"]:
            skipped = {x["row"] for x in result["skipped"]}
            kept = [s for i, s in enumerate(rows) if s.meta.get("row", i) not in skipped]
            for rank in rankers:  # a method's own choice among the k samples, reported beside pass@k
                result.update(rank(engine, kept, cfg.rollout, cfg.seed, cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                                   terms, scorer))
    finally:
        scorer.close()
    metrics = result.pop("metrics")
    return {"task": cfg.task.name, "checkpoint": checkpoint, "split": split, "generated": is_generated(rows),
            **result, **metrics,
            "verifiers": [spec for spec, _ in terms] or "each sample's own"}


def eval_rankers(cfg: Config, checkpoint: str, samples: int) -> list:
    """Every registered method's `eval_rank` that applies to this evaluation (a method's choice
    among k samples may be asked for by a run that did not train with it on, so all are asked)."""
    asked = (METHODS.get(name) for name in METHODS.in_order())
    return [r for r in (m.eval_rank(cfg, checkpoint, samples) for m in asked if m.eval_rank is not None) if r is not None]


def default_out(checkpoint: str) -> Path:
    """`<checkpoint>.eval.json` beside a checkpoint directory (never inside it: a file there breaks
    its sha256 manifest); for "tiny" or a hub name, eval.json in the working directory."""
    local = Path(checkpoint).expanduser()
    if not local.is_dir():
        return Path("eval.json")
    local = local.resolve()
    return local.with_name(f"{local.name}.eval.json")


def _checkpoint_holding(out: Path, checkpoint: str) -> Path | None:
    """The checkpoint directory `out` lies in: the one evaluated, or any saved checkpoint (a folder
    with a state.json) among its parents; else None."""
    out = out.expanduser().resolve()
    local = Path(checkpoint).expanduser()
    if local.is_dir() and out.is_relative_to(local.resolve()):
        return local.resolve()
    return next((p for p in out.parents if (p / "state.json").is_file()), None)


def report_path(checkpoint: str, out: str | None) -> Path:
    """Where the report goes (`--out`, else `default_out`); refused, one line, inside a checkpoint: a
    file written there makes a resume call it corrupt, or replaces its weights."""
    path = Path(out) if out else default_out(checkpoint)
    refuse_inside_checkpoint(path, checkpoint, "--out", ".eval.json")
    return path


def refuse_inside_checkpoint(path: Path, checkpoint: str, flag: str, suffix: str = "-merged") -> None:
    """One line (ConfigError) when `path` lies in a checkpoint (`_checkpoint_holding`), naming a path beside it."""
    inside = _checkpoint_holding(path, checkpoint)
    if inside is not None:
        raise ConfigError(f"{flag} {path}: inside the checkpoint {inside}, which is never written to (a file there "
                          f"breaks its sha256 manifest or replaces its weights); write it beside, e.g. "
                          f"{flag} {inside.with_name(inside.name + suffix)}")


def write_report(report: dict, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    return out


def format_table(report: dict) -> str:
    """The scalar fields as an aligned two-column table for the terminal."""
    skip = {"examples", "skipped", "verifiers", "generated"}
    rows = [(k, f"{v:.4f}" if isinstance(v, float) else str(v)) for k, v in report.items() if k not in skip]
    rows.append(("skipped rows", str(len(report.get("skipped", [])))))
    rows += [(f"  row {b['row']}", b["reason"]) for b in report.get("skipped", [])]  # each with its reason
    # only rows held out of a data file: a generated split's size is task.eval_size, a training split is not held out
    held_out = report.get("split", "eval") == "eval" and not report.get("generated", False)
    note = small_split_note(report.get("n")) if held_out else ""
    rows += [("note", note.strip(" ()"))] if note else []
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
