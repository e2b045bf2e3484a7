"""The task half of config validation: `task.name` resolves to a module with a `build`, and
`task.args` are arguments, column keys, box formats, templates and prompt wordings it accepts.
Run by `mmrlvr.checks.validate` before the model loads."""

from __future__ import annotations

import inspect
from typing import Iterable, Sequence

from mmrlvr.config.schema import Config
from mmrlvr.config.keys import near_name
from mmrlvr.checks.rules import _line


def task_module(name: str):
    """The module of task `name` ("counting" or "package.module"), or raise ModuleNotFoundError.

    The lookup is `mmrlvr.tasks.task_module` (the one training uses); only the error differs."""
    from mmrlvr.tasks import UnknownTask
    from mmrlvr.tasks import task_module as lookup

    try:
        return lookup(name)
    except UnknownTask:
        raise ModuleNotFoundError(f"no task module {name!r}", name=name) from None


# arguments whose values a check of their own names in its own words (one line per key, never two)
CHECKED_APART = ("columns", "template", "box_format", "prompt_template", "system_prompt", "max_bad_frac")


def _check_task(cfg: Config) -> Iterable[str]:
    try:
        module = task_module(cfg.task.name)
    except ModuleNotFoundError:
        from mmrlvr.tasks._catalogue import task_names

        known = ", ".join(task_names()) or "none found"
        yield _line("task.name", cfg.task.name, f"a task module; known: {known}, or package.module")
        return
    build = getattr(module, "build", None)
    if not callable(build):
        yield _line("task.name", cfg.task.name, "a module with a build(split, size, seed, ...) function")
        return
    params = inspect.signature(build).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    known = [n for n in params if n not in ("split", "size", "seed")]
    if "eval_size" in params and cfg.task.args.get("eval_size", cfg.task.eval_size) != cfg.task.eval_size:
        yield _line("task.args.eval_size", cfg.task.args["eval_size"],
                    f"expected nothing, or task.eval_size ({cfg.task.eval_size}): one size drives the held-out split "
                    "and what training excludes")
    for arg in cfg.task.args:
        if arg not in known:
            yield _line(f"task.args.{arg}", cfg.task.args[arg], f"not an argument of task {cfg.task.name!r}; known: "
                        f"{', '.join(known)}{near_name(str(arg), known)}")
    from mmrlvr.config.arg_types import type_problems

    typed = {a: v for a, v in cfg.task.args.items() if a in known and a not in CHECKED_APART}
    for arg, value, want in type_problems(build, typed):
        yield _line(f"task.args.{arg}", value, f"expected {want}, as task {cfg.task.name!r} declares it")


def _check_task_args(cfg: Config, in_memory_rewards: Sequence[str] = ()) -> Iterable[str]:
    """Inside task.args: column keys, box_format, template names and files, and the tags a reward
    verifier needs in a user template (the task's own checks, run here before the model loads).

    `in_memory_rewards`: names of the reward callables `mmrlvr.run` was handed, not yet in
    `cfg.rewards` (they are staged after validation), which score the rows like reward terms."""
    try:
        module = task_module(cfg.task.name)
    except ModuleNotFoundError:
        return  # _check_task names it
    from mmrlvr.tasks._catalogue import arguments, column_keys

    args, takes = cfg.task.args, arguments(module)
    cols, known = args.get("columns"), column_keys(module)
    if cols is not None and not isinstance(cols, dict):
        yield _line("task.args.columns", cols, "a mapping of task field -> column name (or list of names)")
    elif cols and known:
        for key in cols:
            if key not in known:
                yield _line(f"task.args.columns.{key}", cols[key],
                            f"not a column key of task {cfg.task.name!r}; known: {', '.join(known)}")
    elif cols:
        yield _line("task.args.columns", cols, f"task {cfg.task.name!r} reads no data columns")
    if "box_format" in args and "box_format" in takes:
        from mmrlvr.tasks._boxes import BOX_FORMATS

        if args["box_format"] not in BOX_FORMATS:
            yield _line("task.args.box_format", args["box_format"], f"one of {', '.join(BOX_FORMATS)}")
    if "template" in args and "template" in takes:
        from mmrlvr.data.prompts import TEMPLATES

        if args["template"] not in TEMPLATES:
            yield _line("task.args.template", args["template"], f"one of {', '.join(TEMPLATES)}")
    own = getattr(module, "arg_problems", None)  # a task's own checks of its settings (generic: verifier, data)
    if callable(own):
        rewards = [t.verifier for t in cfg.rewards] + list(in_memory_rewards)
        takes_rewards = "rewards" in inspect.signature(own).parameters
        for key, value, why in (own(args, rewards=rewards) if takes_rewards else own(args)):
            yield _line(key, value, why)
    yield from _check_prompt_formats(cfg, module, args)
    teacher = getattr(module, "teacher_problem", None)
    if cfg.warm_start.steps > 0 and not cfg.warm_start.checkpoint and callable(teacher):
        from mmrlvr.tasks import model_type_of

        why = teacher(args, model_type_of(cfg.model.path) if "model_type" in takes else None)
        if why:
            yield _line("warm_start.steps", cfg.warm_start.steps, why)


def _check_prompt_formats(cfg: Config, module, args: dict) -> Iterable[str]:
    """The user's wording (template, `prompt` column) asks for what the scoring verifiers read."""
    from mmrlvr.data.prompt_formats import format_problems

    for key, value, why in format_problems(args, module, [t.verifier for t in cfg.rewards], cfg.eval.verifiers):
        yield _line(key, value, why)
