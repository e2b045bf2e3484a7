"""`mmrlvr.run`: the whole run from Python, with in-memory data and reward callables.

This is a thin layer over `mmrlvr.train.loop.train(cfg)`, not a second trainer. What a TRL user
hands over in memory is written into the run directory as what the YAML path already reads, so
the loop, the checks and the checkpoints are the same, and the run reruns from the CLI:
- `train_data` / `eval_data` (a `datasets.Dataset` or a list of dicts) become
  `<output_dir>/inputs/train` and `inputs/eval` (`save_to_disk` directories for tasks that read
  through `mmrlvr.data.io`, JSONL for the video tasks), passed as `task.args.data` / `eval_data`
  and read through the task's column mapping (`task.args.columns`) like any file.
- each reward callable `fn(completion, sample) -> float | Verdict` is pickled by value with
  cloudpickle into `inputs/rewards/` beside a small plug-in file, and appended to `rewards:` as
  a term of weight 1. The verifier worker pool imports that file in its spawned processes, so
  lambdas and closures defined in a notebook run there under `verifier_timeout`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mmrlvr.config import Config, ConfigError, RewardTerm, _build, apply_overrides, load_config, to_dict

INPUTS = "inputs"
_LOADER = '''"""Reward callables handed to mmrlvr.run, pickled by value (written by mmrlvr.api; rerunnable)."""
from pathlib import Path

import cloudpickle

_HERE = Path(__file__).resolve().parent
'''


def as_config(config: str | Path | dict | Config, overrides: Sequence[str] = ()) -> Config:
    """A `Config` from a YAML path, a nested dict or a `Config`, with dotted overrides applied."""
    overrides = list(overrides)
    if isinstance(config, (str, Path)):
        return load_config(config, overrides)
    if isinstance(config, Config):
        config = to_dict(config)
    if not isinstance(config, dict):
        raise ConfigError(f"config: expected a YAML path, a dict or a Config, got {type(config).__name__}")
    return _build(Config, apply_overrides(json.loads(json.dumps(config, default=list)), overrides), "")


def _reads_io(task: str) -> bool:
    """True for tasks whose rows go through `mmrlvr.data.io` (a column mapping): Arrow on disk."""
    from mmrlvr.tasks import task_module

    return hasattr(task_module(task), "COLUMNS")


def stage_data(data: Any, where: Path, arrow: bool) -> str:
    """Write `data` (a `datasets.Dataset` or a list of dicts) where the task can read it."""
    import datasets

    if isinstance(data, (list, tuple)):
        if not all(isinstance(r, dict) for r in data):
            raise ConfigError("train_data/eval_data: a list must hold dicts (one per row)")
        data = datasets.Dataset.from_list(list(data))
    if not isinstance(data, datasets.Dataset):
        raise ConfigError(f"train_data/eval_data: expected a datasets.Dataset or a list of dicts, got {type(data).__name__}")
    if len(data) == 0:
        raise ConfigError(f"train_data/eval_data: the dataset has no rows ({where.name})")
    if arrow:
        data.save_to_disk(str(where))
        return str(where)
    path = where.with_suffix(".jsonl")
    data.to_json(str(path), lines=True)
    return str(path)


def _name(fn: Callable, i: int, taken: set) -> str:
    name = getattr(fn, "__name__", "") or ""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in taken:
        name = f"reward_{i}"
    taken.add(name)
    return name


def stage_rewards(rewards: Iterable[Callable], where: Path) -> list[str]:
    """Pickle each callable by value and write a plug-in file naming them; return their specs."""
    import cloudpickle

    where.mkdir(parents=True, exist_ok=True)
    lines, specs, taken = [_LOADER], [], set()
    for i, fn in enumerate(rewards):
        if not callable(fn):
            raise ConfigError(f"rewards[{i}]: {fn!r} is not callable; expected fn(completion, sample) -> float | Verdict")
        name = _name(fn, i, taken)
        try:
            (where / f"{name}.pkl").write_bytes(cloudpickle.dumps(fn))
        except Exception as exc:  # noqa: BLE001 - e.g. a closure over an open file or a lock
            raise ConfigError(f"rewards[{i}] ({name}): cannot be sent to the verifier workers: {exc}") from None
        lines.append(f'{name} = cloudpickle.loads((_HERE / "{name}.pkl").read_bytes())\n')
        specs.append(f"{where / 'rewards.py'}:{name}")
    (where / "rewards.py").write_text("".join(lines))
    return specs


def prepare(cfg: Config, train_data=None, eval_data=None, rewards=None) -> Config:
    """`cfg` with the in-memory inputs written under `<output_dir>/inputs` and named in it."""
    inputs = Path(cfg.output_dir) / INPUTS
    if inputs.exists():
        shutil.rmtree(inputs)  # one run's inputs: never mix a previous call's data or rewards
    args = dict(cfg.task.args)
    if train_data is not None or eval_data is not None:
        from mmrlvr.tasks import task_module
        import inspect

        params = inspect.signature(task_module(cfg.task.name).build).parameters
        if "data" not in params:
            raise ConfigError(f"task {cfg.task.name!r} builds its own samples and takes no data; "
                              "train_data/eval_data need a task that reads rows (geometry, chart, grounding, "
                              "nextqa, temporal_grounding or your own)")
        if train_data is None:
            raise ConfigError("eval_data without train_data: pass train_data (or set task.args.data)")
        inputs.mkdir(parents=True)
        arrow = _reads_io(cfg.task.name)
        args["data"] = stage_data(train_data, inputs / "train", arrow)
        if eval_data is not None:
            args["eval_data"] = stage_data(eval_data, inputs / "eval", arrow)
    terms = list(cfg.rewards)
    if rewards:
        terms += [RewardTerm(spec, 1.0) for spec in stage_rewards(rewards, inputs / "rewards")]
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, args=args), rewards=terms)


def run(config: str | Path | dict | Config, *, train_data=None, eval_data=None,
        rewards: Sequence[Callable] | None = None, overrides: Sequence[str] = ()) -> dict:
    """Train (warm start, RL, before/after evaluation) and return the run's summary.

    `config`: a YAML path, a dict or a `Config`; `overrides`: dotted "key=value" strings applied
    on top. `train_data`/`eval_data`: a `datasets.Dataset` or a list of dicts, read through the
    task's column mapping (no `eval_data`: a held-out slice of `train_data`). `rewards`: callables
    `fn(completion, sample) -> float | Verdict`, each a reward term of weight 1 added to the
    config's `rewards:`, run in the verifier pool under `verifier_timeout`.
    """
    from mmrlvr.train.loop import train
    from mmrlvr.validate import validate_config

    cfg = validate_config(as_config(config, overrides))  # bad settings named before anything is written
    return train(prepare(cfg, train_data, eval_data, rewards))
