"""`mmrlvr train|eval|verifiers|score ...`: the command line."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_train(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.train.loop import train

    cfg = load_config(args.config, args.overrides)
    summary = train(cfg)
    print(json.dumps({k: summary[k] for k in ("eval_before", "eval_after", "accuracy_gain", "wall_time_s", "run_dir")}, indent=1))
    return 0


def _cmd_eval(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.train.eval_cli import run_eval

    cfg = load_config(args.config, args.overrides)
    result = run_eval(cfg, args.checkpoint, split=args.split)
    print(json.dumps(result, indent=1))
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
        raise ConfigError(f"{exc.filename}: {exc.strerror}") from None
    finally:
        scorer.close()
    print(f"scored {counts.scored} lines ({counts.bad_references} with a bad reference), "
          f"{counts.bad_lines} bad lines -> {args.output}", file=sys.stderr)
    return 1 if counts.bad_lines or counts.bad_references else 0


def _cmd_verifiers(args) -> int:
    from mmrlvr.verifiers.base import available_verifiers

    for name, text in available_verifiers().items():
        print(f"{name:10s} {text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmrlvr", description="RL with verifiable rewards for VLMs")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="warm start (optional) + RL run from a YAML config")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.lr=1e-5")
    p.set_defaults(fn=_cmd_train)
    p = sub.add_parser("eval", help="greedy held-out accuracy of a checkpoint")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--checkpoint", required=True, help="a model directory (e.g. runs/x/checkpoints/step_60)")
    p.add_argument("--split", default="eval", choices=["eval", "train"])
    p.set_defaults(fn=_cmd_eval)
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
    p = sub.add_parser("verifiers", help="list available verifiers")
    p.set_defaults(fn=_cmd_verifiers)
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bars say what matters
    from mmrlvr.config import ConfigError

    try:
        return args.fn(args)
    except (ConfigError, KeyError, FileNotFoundError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        for line in str(text).splitlines() or [type(exc).__name__]:
            print(f"mmrlvr: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
