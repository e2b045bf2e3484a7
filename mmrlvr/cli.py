"""`mmrlvr train|eval|verifiers|score ...`: the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from mmrlvr.config import Config, ConfigError

TRAIN_EPILOG = (
    f"config keys: {', '.join(f.name for f in dataclasses.fields(Config))}. Every key of every section "
    "with its default and a one-line doc: `mmrlvr config --show` (`mmrlvr config --show CONFIG [overrides]` "
    "prints a file resolved)."
)


def _cmd_train(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    cfg = load_config(args.config, args.overrides)
    summary = train(cfg)
    if args.merge:
        from mmrlvr.models.load import merge_checkpoint
        from mmrlvr.train.checkpoint import latest_checkpoint

        summary["merged"] = str(merge_checkpoint(str(latest_checkpoint(cfg.output_dir)), Path(cfg.output_dir) / "merged"))
    keys = ("eval_before", "eval_after", "accuracy_gain", "wall_time_s", "run_dir", "merged")
    print(json.dumps({k: summary[k] for k in keys if k in summary}, indent=1))
    from mmrlvr.data.heldout import small_split_note

    note = small_split_note(summary.get("eval_after", {}).get("n"))
    if note:
        print(f"mmrlvr: note: {note.strip().strip('()')}", file=sys.stderr)
    return 0


def _cmd_eval(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.train.eval_cli import default_out, format_table, run_eval, write_report

    if args.samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {args.samples}")
    cfg = load_config(args.config, args.overrides)
    report = run_eval(cfg, args.checkpoint, split=args.split, samples=args.samples)
    out = write_report(report, args.out or default_out(args.checkpoint))
    print(format_table(report))
    print(f"report: {out}", file=sys.stderr)
    return 0


def _cmd_config(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.config_docs import describe_config

    print(describe_config(load_config(args.config, args.overrides) if args.config else None))
    return 0


def _cmd_merge(args) -> int:
    from mmrlvr.models.load import merge_checkpoint

    print(merge_checkpoint(args.checkpoint, args.out))
    return 0


def _cmd_score(args) -> int:
    from mmrlvr.config import ConfigError
    from mmrlvr.verifiers.rescore import score_file
    from mmrlvr.verifiers.score import make_scorer

    if not args.timeout > 0 or args.timeout == float("inf"):
        raise ConfigError(f"--timeout={args.timeout}: expected a finite number of seconds > 0")
    if args.workers < 0:
        raise ConfigError(f"--workers={args.workers}: expected an integer >= 0 (0: in-process)")
    plugins = list(args.verifier or [])
    scorer = make_scorer(args.timeout, args.workers, plugins)
    try:
        counts = score_file(args.input, args.output, scorer, progress=not args.quiet,
                            default_verifier=plugins[0] if len(plugins) == 1 else None, plugins=plugins)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:  # unreadable input, unwritable output: one line, no traceback
        raise ConfigError(f"{exc.filename or args.output}: {exc.strerror or exc}") from None
    finally:
        scorer.close()
    print(f"scored {counts.scored} lines ({counts.bad_references} with a bad reference, "
          f"{counts.failed} where the verifier failed), {counts.bad_lines} bad lines -> {args.output}", file=sys.stderr)
    return 1 if counts.bad_lines or counts.bad_references or counts.failed else 0


def _cmd_verifiers(args) -> int:
    from mmrlvr.verifiers.base import available_verifiers

    for name, text in available_verifiers().items():
        print(f"{name:10s} {text}")
    return 0


def _cmd_tasks(args) -> int:
    from mmrlvr.tasks import task_module
    from mmrlvr.tasks._catalogue import describe, task_names

    names = args.names or task_names()
    print("\n\n".join(describe(task_module(n), n) for n in names))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmrlvr", description="RL with verifiable rewards for VLMs")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="warm start (optional) + RL run from a YAML config", epilog=TRAIN_EPILOG)
    p.add_argument("config", help="YAML file, e.g. configs/quickstart.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-5 algo.algorithm=dapo")
    p.add_argument("--merge", action="store_true", help="after training, write <output_dir>/merged/ (LoRA merged in)")
    p.set_defaults(fn=_cmd_train)
    p = sub.add_parser("eval", help="evaluate a checkpoint on the held-out split; JSON report + table",
                       epilog="Scored with eval.verifiers, else the configured rewards, else each sample's own verifier.")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. eval.verifiers=[count]")
    p.add_argument("--checkpoint", required=True,
                   help="a model or LoRA directory (e.g. runs/x/checkpoints/step_60), a hub name, or 'tiny' (untrained)")
    p.add_argument("--samples", type=int, default=1, metavar="K",
                   help="K > 1 adds mean@K and pass@K over K samples at the rollout temperature")
    p.add_argument("--out", help="report file (default: eval.json in the checkpoint directory)")
    p.add_argument("--split", default="eval", choices=["eval", "train"])
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("config", help="print every config key with its value and one-line doc")
    p.add_argument("--show", action="store_true", help="(the default action) print the keys")
    p.add_argument("config", nargs="?", help="a YAML file to resolve (default: the built-in defaults)")
    p.add_argument("overrides", nargs="*")
    p.set_defaults(fn=_cmd_config)
    p = sub.add_parser("merge", help="write a LoRA checkpoint as one plain model directory")
    p.add_argument("checkpoint")
    p.add_argument("out")
    p.set_defaults(fn=_cmd_merge)
    p = sub.add_parser("score", help="re-score saved rollouts (JSONL) offline")
    p.add_argument("input")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per completion")
    p.add_argument("--workers", type=int, default=2, help="verifier processes (0: in-process, no time bound)")
    p.add_argument("--verifier", action="append", metavar="SPEC",
                   help="allow this verifier (a name, file.py:fn or module:fn; repeatable); rows without "
                        "a 'verifier' field use it when it is the only one. Rows alone may name only "
                        "registered verifiers: a data row never chooses code")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=_cmd_score)
    p = sub.add_parser("tasks", help="list tasks with their task.args (defaults) and data column keys")
    p.add_argument("names", nargs="*", help="only these tasks")
    p.set_defaults(fn=_cmd_tasks)
    p = sub.add_parser("verifiers", help="list available verifiers")
    p.set_defaults(fn=_cmd_verifiers)
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bars say what matters
    from mmrlvr.data.feed import BadMediaError
    from mmrlvr.data.io import DataError
    from mmrlvr.data.media import MediaError

    try:
        return args.fn(args)
    except (ConfigError, KeyError, FileNotFoundError, DataError, BadMediaError, MediaError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        for line in str(text).splitlines() or [type(exc).__name__]:
            print(f"mmrlvr: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
