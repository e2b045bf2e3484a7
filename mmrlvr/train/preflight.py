"""What a run checks before its model loads, in one place: `mmrlvr train` runs the settings and
data steps on its way in, and `mmrlvr validate` runs all of them and stops there.

A run that would fail on its data, a reward plug-in or its memory after minutes of model loading
and warm start is told so in seconds: the settings (`validate_config`, this machine included),
the rows of both splits and every one of their images and videos (under the one bad-row rule,
`mmrlvr.data.bad_rows`), each reward term called on one real sample, and the memory plan of the
hardware the config's header states. Each problem is one line (a `ConfigError` or `DataError`,
which the CLI prints as `mmrlvr: error: ...` with exit status 2).
"""

from __future__ import annotations

import threading
from pathlib import Path

from mmrlvr.config import Config, ConfigError, load_config
from mmrlvr.checks.validate import check_sample_verifiers, validate_config
from mmrlvr.data.bad_rows import BadRows, max_bad_frac_setting
from mmrlvr.data.feed import decode_sample
from mmrlvr.data.media import MediaError
from mmrlvr.tasks import load_task

CPU_WARN_GB = 3.0  # weights (in model.dtype) above which a CPU fallback is worth a warning line


def check_settings(cfg: Config) -> Config:
    """Every setting, this machine's device included, the dtype training can step, and an output_dir
    the run may write (a model inside the run's own files, someone else's files: before any is removed)."""
    from mmrlvr.train.precision import training_problem
    from mmrlvr.train.run_dir import RunDirError
    from mmrlvr.train.run_dir_paths import run_dir_problem

    validate_config(cfg)  # every bad setting named before anything heavy runs
    unsafe = run_dir_problem(cfg)
    if unsafe:
        raise RunDirError(unsafe)
    why = training_problem(cfg.model.dtype)  # (evaluation takes any dtype)
    if why:
        raise ConfigError(why)
    return cfg


def load_splits(cfg: Config) -> tuple[list, list, list[str]]:
    """(train rows, held-out rows, the verifier specs the config names): rows that name code the
    config does not are refused here (a data row never chooses code)."""
    from mmrlvr.train.setup import task_args

    args = task_args(cfg)  # one held-out size for both splits
    train_set = load_task(cfg.task.name, "train", cfg.task.train_size, cfg.seed, **args)
    eval_set = load_task(cfg.task.name, "eval", cfg.task.eval_size, cfg.seed, **args)
    plugins = [t.verifier for t in cfg.rewards] + list(cfg.eval.verifiers)  # only the config may name code to run
    check_sample_verifiers([*train_set, *eval_set], plugins)
    return train_set, eval_set, plugins


def check_media(cfg: Config, samples) -> int:
    """Decode every image and video of `samples` as a batch would (the config's video limits);
    each failure counts against the bad-row limit, which raises DataError naming the first rows.
    Returns the rows whose media failed (within the limit)."""
    bad = BadRows.of(samples, max_bad_frac_setting(cfg.task)[0])
    limits = {"max_frames": cfg.model.video_max_frames, "max_pixels": cfg.model.video_max_pixels}
    for s in samples:
        try:
            decode_sample(s, limits)
        except MediaError as exc:
            bad.record(s.id, f"{s.id}: {exc}")
    bad.check()
    return len(bad.at_decode)


def check_rewards(cfg: Config, sample) -> None:
    """Call each reward term (or the sample's own verifier) on `sample` with its reference as the
    answer: a plug-in that raises, hangs past `verifier_timeout` or returns no score is named now,
    not after the warm start, when its zeros would look like a policy that learns nothing."""
    from mmrlvr.train.rewards import reward_terms
    from mmrlvr.verifiers.base import is_failure, resolve_verifier, safe_verify

    completion = f"<answer>{sample.reference}</answer>"
    for i, (spec, _) in enumerate(reward_terms(cfg.rewards, sample)):
        key = f"rewards[{i}].verifier" if cfg.rewards else f"sample {sample.id!r}: verifier"
        box: list = []
        call = threading.Thread(target=lambda: box.append(safe_verify(resolve_verifier(spec), completion, sample,
                                                                      timeout=cfg.verifier_timeout)), daemon=True)
        call.start()
        call.join(cfg.verifier_timeout)
        if not box:
            raise ConfigError(f"{key}={spec!r}: did not return within verifier_timeout={cfg.verifier_timeout:g}s "
                              f"on sample {sample.id!r}")
        if is_failure(box[0]):
            raise ConfigError(f"{key}={spec!r}: failed on sample {sample.id!r} ({box[0].reason})")


def plan_fit(path: str, overrides: list[str]) -> str:
    """The memory plan against the hardware the config's header states: raises ConfigError when
    it does not fit; returns what was planned (or why nothing was) for the summary."""
    from mmrlvr.plan.command import plan_config
    from mmrlvr.plan.hardware import header_hardware

    if header_hardware(path) is None:
        return "no '# Hardware:' header: memory not planned (mmrlvr plan CONFIG --gpus N --gpu-memory GB)"
    try:
        result, _ = plan_config(path, overrides)
    except (ConfigError, FileNotFoundError, ValueError) as exc:  # a model the plan cannot size runs all the same
        return f"memory not planned ({str(exc).splitlines()[0]})"
    where = f"{result['gpus']} x {result['gpu_memory_gb']:g} GB GPU"
    if not result["fits"]:
        raise ConfigError(f"memory: the plan needs {result['per_gpu_gb']:.1f} GB per GPU, more than the {where} the "
                          f"config's header states (`mmrlvr plan {path}` for the phases and what to change)")
    return f"plan {result['per_gpu_gb']:.1f} GB per GPU on {where}: fits"


def cpu_fallback_note(cfg: Config) -> str | None:
    """`device=auto` on a machine without CUDA trains on the CPU: worth one warning line when the
    plan sizes the model's weights above CPU_WARN_GB (a run that would take days, not minutes)."""
    import torch

    if cfg.device != "auto" or torch.cuda.is_available():
        return None
    from mmrlvr.plan.shape import model_shape

    try:
        params = model_shape(cfg.model.path).params
    except Exception:  # noqa: BLE001 - a model the plan cannot size: the loader speaks for it
        return None
    gb = params * (2 if cfg.model.dtype in ("bfloat16", "float16") else 4) / 1e9
    if gb <= CPU_WARN_GB:
        return None
    return (f"device=auto and torch {torch.__version__} sees no CUDA device: training {cfg.model.path} "
            f"({params / 1e9:.1f} B parameters, {gb:.1f} GB of {cfg.model.dtype} weights) on the CPU; "
            "set device=cuda to stop instead")


def preflight(path: str, overrides: list[str] | None = None) -> list[str]:
    """Everything `mmrlvr validate` checks, in the order a run meets it; returns the summary
    lines (warnings first, prefixed) when a run would start, raises on the first problem."""
    from mmrlvr.checks.notes import config_warnings

    overrides = list(overrides or [])
    cfg = check_settings(load_config(path, overrides))
    train_set, eval_set, _ = load_splits(cfg)
    bad = check_media(cfg, train_set) + check_media(cfg, eval_set)
    if not train_set:
        raise ConfigError(f"task {cfg.task.name!r}: the train split has no rows")
    check_rewards(cfg, train_set[0])
    notes = [*config_warnings(cfg), *filter(None, [cpu_fallback_note(cfg)])]
    media = f" ({bad} with media that fail to decode, within task.max_bad_frac)" if bad else ""
    return [*(f"warning: {n}" for n in notes),
            f"{Path(path).name}: a run would start: {len(train_set)} train and {len(eval_set)} held-out rows{media}, "
            f"rewards called on sample {train_set[0].id!r}; {plan_fit(path, overrides)}"]
