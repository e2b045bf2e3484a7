"""Process setup and policy preparation (resume, warm start) for the loop."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from mmrlvr.config import Config, ConfigError
from mmrlvr.models.load import cast_frozen, load_policy
from mmrlvr.models.patches.options import ForwardOptions
from mmrlvr.train.precision import accelerate_mixed_precision, compute_dtype, sharded_engine_launch
from mmrlvr.checks.validate import tracker_problem


def set_threads_and_seed(cfg: Config, log_with: list[str] | None = None):
    """Create the Accelerator (with its trackers, `log_with`), then pin torch's CPU threads and
    seed everything.

    Threads are set after the Accelerator because it may change them; on small VMs torch's
    default OpenMP threads spin-wait and make tiny ops ~100x slower.
    """
    from accelerate import Accelerator
    from accelerate.utils import set_seed  # transformers.set_seed imports trainer_utils, which imports peft (~60 MB)

    torch.set_num_threads(cfg.threads)
    trackers = [_tracker(name, cfg.output_dir) for name in (log_with or [])]
    # "auto" without CUDA must say cpu=True: otherwise accelerate treats a torchrun/gloo launch
    # as a single process on every rank (DistributedType.NO), with no gradient averaging
    cpu = cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available())
    # model.dtype decides the precision, whatever the accelerate config says: a bf16 model computes
    # in bf16 over float32 masters, held by FSDP2 / DeepSpeed themselves when the launch is one
    # (their mixed precision), else by `precision.MasterWeights` (no autocast)
    mixed = accelerate_mixed_precision(cfg.model.dtype, sharded_engine_launch(os.environ))
    accelerator = Accelerator(cpu=cpu, log_with=trackers or None, project_dir=cfg.output_dir, mixed_precision=mixed)
    why = sharding_fallback(os.environ, str(accelerator.distributed_type).split(".")[-1])
    if why:
        raise ConfigError(why)
    if accelerator.device.type == "cpu":
        torch.set_num_threads(cfg.threads)
    set_seed(cfg.seed)
    return accelerator


def sharding_fallback(env, distributed_type: str) -> str | None:
    """Why the launch asked for FSDP / DeepSpeed but accelerate set up something else, else None.

    accelerate 1.15 takes its FSDP branch only for GPU-like distributed types (and DeepSpeed only
    without `cpu`): a `distributed_type: FSDP` config on CPU silently runs as MULTI_CPU (DDP,
    unsharded), which would hide the memory a user planned for."""
    for var, kind in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DEEPSPEED")):
        if str(env.get(var, "false")).lower() == "true" and distributed_type != kind:
            return (f"the accelerate config asks for {kind} ({var}=true) but accelerate set up {distributed_type}: "
                    "accelerate shards only on GPUs/accelerators; on CPU run DDP with "
                    "torchrun --nproc_per_node N -m mmrlvr.cli train ... (configs/accelerate/ddp_cpu.yaml says how)")
    return None


def sharded_launch(accelerator) -> bool:
    """Several processes whose every forward all-gathers parameters: FSDP, or DeepSpeed ZeRO-3."""
    kind = str(accelerator.distributed_type).split(".")[-1]
    if accelerator.num_processes < 2 or kind not in ("FSDP", "DEEPSPEED"):
        return False
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    return kind == "FSDP" or getattr(plugin, "zero_stage", 0) == 3


def _tracker(name: str, run_dir: str):
    """tensorboard writes to <run_dir>/tensorboard; other names go to accelerate as they are."""
    why = tracker_problem(name)
    if why:
        raise ConfigError(f"train.log_with={name!r}: expected {why}")
    if name == "tensorboard":
        from accelerate.tracking import TensorBoardTracker

        return TensorBoardTracker("tensorboard", run_dir)
    return name


def flat_config(cfg: Config) -> dict:
    """The config as dotted scalar keys (`train.lr`), the form trackers store hyper-parameters in."""
    out: dict = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value if isinstance(value, (int, float, str, bool)) else str(value)

    walk("", dataclasses.asdict(cfg))
    return out


def start_trackers(accelerator, cfg: Config, run_dir: Path, purge_step: int | None = None) -> None:
    """Open the trackers with the resolved config as hyper-parameters (project "mmrlvr").

    `purge_step` (on resume: the checkpoint's step + 1, or 0 without one) makes tensorboard hide
    the events a killed run wrote from that step on, so its curves show each step once.
    """
    if accelerator.log_with:
        for tracker in accelerator.log_with:  # built in set_threads_and_seed, started here
            if purge_step is not None and getattr(tracker, "name", None) == "tensorboard":
                tracker.init_kwargs["purge_step"] = purge_step
        accelerator.init_trackers("mmrlvr", config=flat_config(cfg),
                                  init_kwargs={"wandb": {"name": Path(run_dir).name}})


def _load_from(cfg: Config, path: str | Path):
    """The policy to train from a directory: trainable weights in float32 (the masters), frozen
    ones in `model.dtype`."""
    if cfg.model.lora_rank > 0 and (Path(path) / "adapter_config.json").exists():
        from peft import PeftModel

        base, processor = load_policy(dataclasses.replace(cfg.model, lora_rank=0))  # frozen: model.dtype
        # peft upcasts the adapter to float32 (autocast_adapter_dtype); a checkpoint's is float32 already
        return PeftModel.from_pretrained(base, str(path), is_trainable=True, autocast_adapter_dtype=True), processor
    return load_policy(dataclasses.replace(cfg.model, path=str(path)), master_weights=True)


def prepare_policy(cfg: Config, ckpt: Path | None, train_set, run_dir: Path, progress):
    """(model, processor, warm-start info): from a checkpoint, a given warm start, or a new one.
    The model's trainable weights are float32 (the masters of a bf16 run), frozen ones in `model.dtype`."""
    from mmrlvr.train.sft import warm_start

    if ckpt is not None:
        model, processor = _load_from(cfg, ckpt)
        return model, processor, None
    ws = cfg.warm_start
    if ws.checkpoint:
        model, processor = load_policy(dataclasses.replace(cfg.model, path=ws.checkpoint), master_weights=True)
        return model, processor, {"source": ws.checkpoint}
    done = run_dir / "warm_start"
    if ws.steps > 0 and (done / "warm_start.json").exists():
        model, processor = load_policy(dataclasses.replace(cfg.model, path=str(done)), master_weights=True)
        return model, processor, json.loads((done / "warm_start.json").read_text())
    model, processor = load_policy(cfg.model, master_weights=True)
    if ws.steps <= 0:
        return model, processor, None
    torch.manual_seed(cfg.seed)
    losses = warm_start(model, processor, train_set, ws.steps, ws.lr, ws.batch_size, cfg.seed,
                        progress=progress.warm_start(ws.steps), options=ForwardOptions.of(cfg.train),
                        dtype=compute_dtype(cfg.model.dtype))
    info = {"source": str(done), "steps": ws.steps, "loss_first": losses[0], "loss_last": losses[-1]}
    tmp = Path(tempfile.mkdtemp(prefix=".warm-", dir=run_dir))
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / "warm_start.json").write_text(json.dumps(info))
    if done.exists():
        shutil.rmtree(done)
    os.replace(tmp, done)
    return model, processor, info


def initial_policy_path(cfg: Config, run_dir: Path) -> str:
    """Where the policy RL started from lives: the given warm start, this run's warm start, or the model."""
    ws = cfg.warm_start
    if ws.checkpoint:
        return ws.checkpoint
    if ws.steps > 0:
        done = Path(run_dir) / "warm_start"
        if not (done / "warm_start.json").exists():
            raise FileNotFoundError(f"{done}: the warm-started policy, the KL reference of this run, is missing")
        return str(done)
    return cfg.model.path


def reference_policy(cfg: Config, algo, model, resumed: bool, run_dir: Path):
    """The frozen KL reference, or None (no KL, or LoRA: the base with the adapter off).

    It is the policy RL started from: a copy of it on a fresh run, and reloaded from where it was
    saved (never the resumed checkpoint) on a resumed one, so a resumed run regularises towards
    the same policy as an uninterrupted one. Its weights are in `model.dtype` (bf16: the policy's
    float32 masters rounded, as the policy's own forward weights are).
    """
    if algo.kl_coef <= 0 or cfg.model.lora_rank > 0:
        return None
    if resumed:  # loaded as the fresh run's policy was (float32 trainable weights), then frozen alike
        model, _ = load_policy(dataclasses.replace(cfg.model, path=initial_policy_path(cfg, run_dir)), master_weights=True)
        ref = model
    else:
        import copy

        ref = copy.deepcopy(model)
    ref = ref.eval().requires_grad_(False)
    cast_frozen(ref, compute_dtype(cfg.model.dtype))  # frozen: all of it in the model's dtype, as the policy computes
    return ref


def task_args(cfg: Config) -> dict:
    """`task.args` for both splits, with `eval_size` set from `task.eval_size` for tasks that draw
    their held-out split from the same generator as the training split and exclude it by count
    (a build function with an `eval_size` parameter): one size drives both, so a larger eval set
    can never leak into training. A build function with a `model_type` parameter (grounding) gets
    the model's `config.model_type`, which picks its coordinate convention; one with `max_bad_frac`
    gets `task.max_bad_frac` (the one bad-row limit, `mmrlvr.data.bad_rows`)."""
    import inspect

    from mmrlvr.data.bad_rows import max_bad_frac_setting
    from mmrlvr.tasks import task_module

    args = dict(cfg.task.args)
    try:
        build = task_module(cfg.task.name).build
    except (KeyError, AttributeError):
        return args  # load_task reports the unknown task
    if "eval_size" in inspect.signature(build).parameters:
        if args.get("eval_size", cfg.task.eval_size) != cfg.task.eval_size:
            from mmrlvr.config import ConfigError  # validate_config names this first; kept for direct callers

            raise ConfigError(
                f"task.args.eval_size={args['eval_size']} differs from task.eval_size={cfg.task.eval_size}: "
                "the held-out boards excluded from training must be the ones evaluated; set only task.eval_size"
            )
        args["eval_size"] = cfg.task.eval_size
    frac = max_bad_frac_setting(cfg.task)[0]  # task.max_bad_frac, or an old name for it
    if frac is not None and "max_bad_frac" in inspect.signature(build).parameters:
        args["max_bad_frac"] = frac
    if "model_type" in inspect.signature(build).parameters and "model_type" not in args:
        from mmrlvr.tasks import model_type_of  # grounding: the model family's box coordinates

        args["model_type"] = model_type_of(cfg.model.path)
    return args
