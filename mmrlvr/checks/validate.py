"""Check a whole config before anything heavy runs (model load, warm start, first evaluation).

Every problem is one line naming the key, the value and what is allowed; `validate_config`
raises one `ConfigError` listing them all, and the CLI prints each as `mmrlvr: error: ...` with
exit status 2. Adding a check is one line: a `Rule` in `RULES` for a value range or a fixed set
of names, or a function in `CHECKS` for anything that needs code (import a plug-in, a path).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

from mmrlvr.config.schema import LR_SCHEDULES as SCHEDULES, Config, ConfigError
from mmrlvr.data.bad_rows import conflicting_settings
from mmrlvr.models.model_dir import hub_problem, model_path_problem
from mmrlvr.checks.algo_checks import _check_algo, _check_policy_loss, policy_loss_names
from mmrlvr.checks.packing_checks import check_padding_free
from mmrlvr.checks.bounds import check_bounds, check_device, check_launch_device
from mmrlvr.checks.task_checks import _check_task, _check_task_args, task_module  # noqa: F401 - re-exported
from mmrlvr.checks.rules import MAX_SERVER_TIMEOUT_S, METHOD_SETTINGS, Rule, _get, _line, _num, above, at_least, either, finite, one_of, rule_lines  # noqa: F401 - re-exported
from mmrlvr.checks.rollout_checks import _check_engine, _check_episode, _check_server
from mmrlvr.rollout.factory import ENGINE_BUILDERS, ENGINES


DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("sdpa", "eager", "flash_attention_2")

RULES: list[Rule] = [
    Rule("seed", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0"),
    # "" would make the current directory the run directory (config.yaml, checkpoints/ written there)
    Rule("output_dir", lambda v: isinstance(v, str) and v.strip() != "", "a non-empty path (the run directory)"),
    Rule("threads", at_least(1), "an integer >= 1"),
    Rule("device", one_of(*DEVICES), f"one of {', '.join(DEVICES)}"),
    Rule("verifier_timeout", above(0), "a finite number of seconds > 0"),
    Rule("verifier_workers", at_least(0), "an integer >= 0 (0 runs verifiers in-process)"),
    Rule("verifier_stop_share", lambda v: v is None or (_num(v) and 0 <= v <= 1), "a number in [0, 1] (or null: never stop)"),
    Rule("model.dtype", one_of(*DTYPES), f"one of {', '.join(DTYPES)}"),
    Rule("model.attn_implementation", one_of(*ATTENTION), f"one of {', '.join(ATTENTION)}"),
    Rule("model.min_pixels", at_least(1), "a number of pixels >= 1 (or null)"),
    Rule("model.max_pixels", at_least(1), "a number of pixels >= 1 (or null)"),
    Rule("model.lora_rank", at_least(0), "an integer >= 0 (0: no LoRA)"),
    Rule("model.lora_alpha", above(0), "a number > 0"),
    Rule("model.video_min_pixels", at_least(1), "a number of pixels >= 1 (or null)"),
    Rule("model.video_max_pixels", at_least(1), "a number of pixels >= 1 (or null)"),
    Rule("model.video_max_frames", at_least(2), "an integer >= 2 (frames go in temporal pairs)"),
    Rule("model.video_total_pixels", at_least(1), "a number of pixels >= 1 (or null)"),
    Rule("task.train_size", at_least(1), "an integer >= 1"),
    Rule("task.eval_size", at_least(1), "an integer >= 1"),
    Rule("task.max_bad_frac", lambda v: v is None or (_num(v) and 0 <= v <= 1), "a fraction in [0, 1]"),
    Rule("task.max_bad_media_frac", lambda v: v is None or (_num(v) and 0 <= v <= 1), "a fraction in [0, 1]"),
    Rule("warm_start.steps", at_least(0), "an integer >= 0 (0: no warm start)"),
    Rule("warm_start.lr", above(0), "a finite number > 0"),
    Rule("warm_start.batch_size", at_least(1), "an integer >= 1"),
    Rule("rollout.group_size", at_least(2), "an integer >= 2 (an RL group of one gives no signal)"),
    Rule("rollout.prompts_per_step", at_least(1), "an integer >= 1"),
    Rule("rollout.max_new_tokens", at_least(1), "an integer >= 1"),
    Rule("rollout.temperature", above(0), "a finite number > 0"),
    Rule("rollout.top_p", lambda v: _num(v) and 0 < v <= 1, "a number in (0, 1]"),
    Rule("rollout.top_k", at_least(0), "an integer >= 0 (0: off)"),
    Rule("rollout.engine", lambda v: v in ENGINE_BUILDERS, either(ENGINES)),
    Rule("rollout.server_url",
         lambda v: v is None or isinstance(v, str) or (isinstance(v, list) and all(isinstance(u, str) for u in v)),
         "an address such as http://127.0.0.1:8000, or a list of addresses (or null)"),
    Rule("rollout.server_timeout", above(0), "a finite number of seconds > 0"),
    Rule("rollout.server_timeout", lambda v: not _num(v) or v <= MAX_SERVER_TIMEOUT_S,
         f"at most {MAX_SERVER_TIMEOUT_S} seconds (a day: one request's whole deadline, connect to last byte)"),
    Rule("rollout.server_key", lambda v: v is None or (isinstance(v, str) and v.strip() != ""),
         "the rollout server's key (text), or null for MMRLVR_ROLLOUT_KEY"),
    Rule("rollout.weight_sync", one_of("auto", "file", "upload", "broadcast"), "auto, file, upload or broadcast"),
    Rule("rollout.async_steps", lambda v: isinstance(v, int) and not isinstance(v, bool) and v in (0, 1),
         "0 (synchronous) or 1 (one step off-policy)"),
    Rule("rollout.sampler", one_of("inverse_cdf", "multinomial"), "inverse_cdf or multinomial"),
    Rule("rollout.vllm_gpu_memory_utilization", lambda v: _num(v) and 0 < v < 1, "a number in (0, 1)"),
    Rule("rollout.vllm_max_model_len", at_least(1), "an integer >= 1"),
    Rule("rollout.vllm_max_num_batched_tokens", at_least(1), "an integer >= 1 (or null)"),
    Rule("rollout.generate_max_rows", at_least(1), "an integer >= 1 (or null: all rows in one call)"),
    Rule("rollout.max_turns", at_least(1), "an integer >= 1"),
    Rule("rollout.max_episode_tokens", at_least(1), "an integer >= 1 (or null: max_turns x max_new_tokens)"),
    Rule("rollout.max_episode_images", at_least(0), "an integer >= 0"),
    Rule("rollout.turn_timeout_s", above(0), "a finite number of seconds > 0"),
    Rule("train.steps", at_least(1), "an integer >= 1"),
    Rule("train.micro_batch_tokens", at_least(1), "an integer >= 1 (or null: split by algo.grad_accum)"),
    Rule("train.lr", above(0), "a finite number > 0"),
    Rule("train.lr_scheduler", one_of(*SCHEDULES), either(SCHEDULES)),
    Rule("train.warmup_steps", at_least(0), "an integer >= 0 (RL steps)"),
    Rule("train.weight_decay", at_least(0), "a finite number >= 0"),
    Rule("train.max_grad_norm", above(0), "a finite number > 0"),
    Rule("train.max_nonfinite_steps", at_least(1), "an integer >= 1 (optimizer steps in a row)"),
    Rule("train.log_every", at_least(1), "an integer >= 1"),
    Rule("train.eval_every", at_least(0), "an integer >= 0 (0: only before and after)"),
    Rule("train.save_every", at_least(0), "an integer >= 0 (0: only at the end)"),
    Rule("eval.batch_size", at_least(1), "an integer >= 1"),
    Rule("eval.max_new_tokens", at_least(1), "an integer >= 1 (or null)"),
    Rule("algo.clip_low", lambda v: _num(v) and 0 <= v < 1, "a number in [0, 1)"),
    Rule("algo.clip_high", at_least(0), "a finite number >= 0"),
    Rule("algo.dual_clip", lambda v: _num(v) and (v == 0 or v > 1), "0 (off) or a finite number > 1"),
    Rule("algo.norm_length", at_least(1), "an integer >= 1 (or null)"),
    Rule("algo.kl_coef", at_least(0), "a finite number >= 0"),
    Rule("algo.entropy_coef", finite, "a finite number"),
    Rule("algo.max_rounds", at_least(1), "an integer >= 1"),
    Rule("algo.overlong_buffer", at_least(-1), "an integer >= 0 (or -1: a fifth of max_new_tokens)"),
    Rule("algo.overlong_factor", at_least(0), "a finite number >= 0"),
    Rule("algo.ppo_epochs", at_least(1), "an integer >= 1"),
    Rule("algo.mini_batches", at_least(1), "an integer >= 1"),
    Rule("algo.grad_accum", at_least(1), "an integer >= 1"),
    Rule("algo.rollout_correction_cap", above(0), "a finite number > 0"),
]


def __getattr__(name: str):
    """`IMPORTANCE_LEVELS`: the registered policy losses, read when asked (the registry imports torch)."""
    if name == "IMPORTANCE_LEVELS":
        return policy_loss_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_rules(cfg: Config) -> Iterable[str]:
    yield from rule_lines(RULES, cfg)


def _check_methods(cfg: Config) -> Iterable[str]:
    """Every registered method's checks of its own settings (its folder's `rules` and `check`), in
    the order the methods are registered, whether the method is on or not."""
    for name in METHOD_SETTINGS.in_order():
        yield from METHOD_SETTINGS.get(name).lines(cfg)


def _check_rewards(cfg: Config) -> Iterable[str]:
    """Each reward term's verifier resolves (plug-ins are imported here, once) and its weight is
    finite. Rewards `mmrlvr.run` staged are pickled code: checked against their recorded hashes,
    never unpickled here (the processes that score load them, after the run lock is held)."""
    for i, term in enumerate(cfg.rewards):
        why = _staged_problem(term.verifier.rsplit(":", 1)[0]) if _is_staged(term.verifier) else _load_problem(term.verifier)
        if why:
            yield _line(f"rewards[{i}].verifier", term.verifier, f"cannot be loaded ({why})")
        if not finite(term.weight):
            yield _line(f"rewards[{i}].weight", term.weight, "expected a finite number")


def _is_staged(spec) -> bool:
    from mmrlvr.data.staged import staged_folder

    return isinstance(spec, str) and ":" in spec and staged_folder(spec.rsplit(":", 1)[0]) is not None


def _staged_problem(path: str) -> str | None:
    """Why the staged file or folder `path` (under `.mmrlvr_inputs/`) is not what was staged, else None."""
    from mmrlvr.data.staged import staged_folder, verify

    why = verify(staged_folder(path))
    if why is None and not Path(path).expanduser().exists():
        why = f"{path} not found"
    return why


def _load_problem(spec: str) -> str | None:
    """Why the verifier `spec` does not resolve to a callable (importing a plug-in), else None."""
    from mmrlvr.verifiers.base import resolve_verifier

    try:
        fn = resolve_verifier(spec, allow_code=True)
        if not callable(fn):
            raise TypeError(f"{type(fn).__name__} is not callable")
    except Exception as exc:  # noqa: BLE001 - any failure to load user code is the config's
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return text.splitlines()[0] if text else type(exc).__name__
    return None


def _check_staged_data(cfg: Config) -> Iterable[str]:
    """Rows `mmrlvr.run` staged (task.args.data / eval_data) are the ones it wrote: a resume on
    rows changed in place would train on other data under the same config."""
    from mmrlvr.data.staged import staged_folder

    for key in ("data", "eval_data"):
        value = cfg.task.args.get(key) if isinstance(cfg.task.args, dict) else None
        if isinstance(value, str) and staged_folder(value) is not None:
            why = _staged_problem(value)
            if why:
                yield _line(f"task.args.{key}", value, f"expected the rows mmrlvr.run staged ({why})")


def tracker_problem(name: str) -> str | None:
    """Why `name` cannot be an accelerate tracker here (unknown, or its package missing), else None."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS
    from accelerate.utils import is_mlflow_available, is_trackio_available, is_wandb_available

    if name not in LOGGER_TYPE_TO_CLASS:
        return f"an accelerate tracker; known: {', '.join(sorted(LOGGER_TYPE_TO_CLASS))}"
    available = {"wandb": is_wandb_available, "mlflow": is_mlflow_available, "trackio": is_trackio_available}
    if name in available and not bool(available[name]()):
        return f"an installed tracker (pip install {name})"
    return None


def _check_eval_and_trackers(cfg: Config) -> Iterable[str]:
    """eval.verifiers resolve like reward terms; each train.log_with tracker exists and is installed."""
    from mmrlvr.verifiers.base import resolve_verifier

    for i, spec in enumerate(cfg.eval.verifiers):
        try:
            resolve_verifier(spec, allow_code=True)
        except Exception as exc:  # noqa: BLE001 - any failure to load user code is the config's
            yield _line(f"eval.verifiers[{i}]", spec, f"cannot be loaded ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
    for name in cfg.train.log_with:
        why = tracker_problem(name)
        if why:
            yield _line("train.log_with", name, f"expected {why}")


def _check_paths(cfg: Config) -> Iterable[str]:
    why = model_path_problem(cfg.model.path)
    if why:
        yield _line("model.path", cfg.model.path, why)
    ckpt = cfg.warm_start.checkpoint
    if ckpt and not Path(ckpt).expanduser().is_dir():
        yield _line("warm_start.checkpoint", ckpt, "an existing model directory")
    if not isinstance(cfg.output_dir, str):  # null: the Rule above leaves None to mean "unset"
        yield _line("output_dir", cfg.output_dir, "expected a non-empty path (the run directory)")
        return
    out = Path(cfg.output_dir).expanduser()
    if out.exists() and not out.is_dir():
        yield _line("output_dir", cfg.output_dir, "a directory (this is a file)")
    else:
        parent = next(p for p in [out, *out.absolute().parents] if p.exists())
        if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
            yield _line("output_dir", cfg.output_dir, f"a writable directory ({parent} is not writable)")


def preset_value(cfg: Config, key: str):
    """algo.<key> as training will see it: the user's value, else the preset's (None if unknown)."""
    from mmrlvr.algos.presets import _BASE, PRESETS

    value = getattr(cfg.algo, key)
    if value is None:
        value = {**_BASE, **PRESETS.get(cfg.algo.algorithm, {})}.get(key)
    return value


def _check_limits(cfg: Config) -> Iterable[str]:
    """Bounds that must agree with each other, and data fractions a NaN would switch off."""
    m = cfg.model
    for lo, hi in (("min_pixels", "max_pixels"), ("video_min_pixels", "video_max_pixels")):
        a, b = getattr(m, lo), getattr(m, hi)
        if _num(a) and _num(b) and a > b:
            yield _line(f"model.{lo}", a, f"at most model.{hi} ({b})")
    accum = cfg.algo.grad_accum
    if cfg.train.micro_batch_tokens is not None and _num(accum) and accum != 1:
        yield _line("algo.grad_accum", accum, "unset (or 1) with train.micro_batch_tokens: the token budget decides "
                    "the micro-batches")
    rows, g = cfg.rollout.generate_max_rows, cfg.rollout.group_size
    if _num(rows) and _num(g) and 1 <= rows < g:  # below 1: the rule says so
        yield _line("rollout.generate_max_rows", rows, f"at least rollout.group_size ({g}): a call generates whole groups")
    frac = cfg.task.args.get("max_bad_frac")
    if frac is not None and not (_num(frac) and 0 <= frac <= 1):
        yield _line("task.args.max_bad_frac", frac, "a fraction in [0, 1]")
    yield from filter(None, [conflicting_settings(cfg.task)])  # the old names and task.max_bad_frac are one limit


CHECKS: list[Callable[[Config], Iterable[str]]] = [
    _check_rules, _check_policy_loss, _check_algo, _check_rewards, _check_eval_and_trackers, _check_task,
    _check_task_args, _check_staged_data, _check_paths, _check_limits, _check_engine,
    check_bounds, _check_server, _check_episode, check_padding_free, _check_methods,
]


# what this machine must have for the run to start here (`mmrlvr plan` and the docs' checks judge
# a config written for GPUs on any machine, so these are apart from CHECKS)
def _check_hub_model(cfg: Config) -> Iterable[str]:
    """A hub name is cached here or downloadable now (offline: one line in seconds, not the loader's retries)."""
    path = cfg.model.path
    if isinstance(path, str) and "/" in path and model_path_problem(path) is None and not Path(path).expanduser().exists():
        why = hub_problem(path)
        if why:
            yield _line("model.path", path, why)


MACHINE_CHECKS: list[Callable[[Config], Iterable[str]]] = [check_device, check_launch_device, _check_hub_model]


def config_errors(cfg: Config, machine: bool = False, in_memory_rewards: Sequence[str] = ()) -> list[str]:
    """Every problem of `cfg`, one line each (empty when the config is usable); with `machine`,
    also what this machine lacks to run it (`MACHINE_CHECKS`). `in_memory_rewards`: the reward
    callables `mmrlvr.run` stages into `rewards:` after validation (their names)."""
    return [line for check in (CHECKS + MACHINE_CHECKS if machine else CHECKS)
            for line in (check(cfg, in_memory_rewards) if check is _check_task_args else check(cfg))]


def validate_config(cfg: Config, in_memory_rewards: Sequence[str] = (), loads_model_path: bool = True) -> Config:
    """Raise ConfigError listing every problem (one per line), this machine's included; return
    `cfg` when there is none. `loads_model_path=False` (`mmrlvr eval`, which loads its
    --checkpoint instead): whether this machine can get `model.path` is not asked."""
    checks = CHECKS + [c for c in MACHINE_CHECKS if loads_model_path or c is not _check_hub_model]
    errors = [line for check in checks
              for line in (check(cfg, in_memory_rewards) if check is _check_task_args else check(cfg))]
    if errors:
        raise ConfigError("\n".join(errors))
    return cfg


def check_sample_verifiers(samples, plugins=()) -> None:
    """A dataset row never chooses code: each sample names a registered verifier or a user plug-in."""
    from mmrlvr.verifiers.base import UntrustedVerifier, check_allowed

    for spec in sorted({s.verifier for s in samples}):
        try:
            check_allowed(spec, plugins)
        except UntrustedVerifier as exc:
            first = next(s.id for s in samples if s.verifier == spec)
            raise ConfigError(f"sample {first!r}: {exc}") from None
