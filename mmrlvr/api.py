"""`mmrlvr.run`: the whole run from Python, with in-memory data and reward callables.

This is a thin layer over `mmrlvr.recipe.loop.train(cfg)`, not a second trainer. What a TRL user
hands over in memory is written into the run directory as what the YAML path already reads, so
the loop, the checks and the checkpoints are the same, and the run reruns from the CLI:
- `train_data` / `eval_data` (a `datasets.Dataset` or a list of dicts) become
  `<output_dir>/.mmrlvr_inputs/train-<hash>/train` and `eval-<hash>/eval` (`save_to_disk`
  directories for tasks that read through `mmrlvr.data.io`, JSONL for the video tasks), passed as
  `task.args.data` / `eval_data` and read through the task's column mapping like any file.
- each reward callable `fn(completion, sample) -> float | Verdict` is pickled by value with
  cloudpickle into `.mmrlvr_inputs/rewards-<hash>/` beside a small plug-in file, and appended to
  `rewards:` as a term of weight 1. The verifier worker pool imports that file in its spawned
  processes, so lambdas and closures defined in a notebook run there under `verifier_timeout`.
Everything is checked before the run directory is touched; then the run lock is taken, and only
then is anything written, and only under `.mmrlvr_inputs/` (content-addressed: `mmrlvr.data.staged`),
so a user's own files and a live run's inputs are never replaced.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mmrlvr.config import Config, ConfigError, short, RewardTerm, build_config, load_config, to_dict
from mmrlvr.config.schema import _build
from mmrlvr.data.staged import STAGED, commit, staged_folder

_LOADER = '''"""Reward callables handed to mmrlvr.run, pickled by value (written by mmrlvr.api; rerunnable).

Code, to be trusted like the config that names this file: importing it unpickles the rewards."""
from pathlib import Path

import cloudpickle

_HERE = Path(__file__).resolve().parent
'''


def as_config(config: str | Path | dict | Config, overrides: Sequence[str] = ()) -> Config:
    """A `Config` from a YAML path, a nested dict or a `Config`, with dotted overrides applied.

    What Python hands over as it comes: `overrides=None`, numpy scalars and arrays, `pathlib.Path`
    values are taken as what they mean; a non-string override or a dict that contains itself is
    one ConfigError."""
    if overrides is None:
        overrides = []
    if isinstance(overrides, str) or not isinstance(overrides, (list, tuple)):
        raise ConfigError(f"overrides: expected a list of 'key=value' strings, got {type(overrides).__name__}")
    for i, item in enumerate(overrides):
        if not isinstance(item, str):
            raise ConfigError(f"overrides[{i}]: expected a 'key=value' string, got {short(item)}")
    overrides = list(overrides)
    if isinstance(config, (str, Path)):
        return load_config(config, overrides)
    if isinstance(config, Config):
        config = to_dict(config)
    if not isinstance(config, dict):
        raise ConfigError(f"config: expected a YAML path, a dict or a Config, got {type(config).__name__}")
    return build_config(_plain(config, "config", set()), overrides)


def _plain(value, where: str, seen: set):
    """`value` as the plain data YAML would give: numpy scalars and arrays to Python numbers and
    lists, paths to strings, tuples to lists; a container that holds itself is refused."""
    if isinstance(value, dict):
        if id(value) in seen:
            raise ConfigError(f"{where}: the dict contains itself")
        seen = seen | {id(value)}
        return {k: _plain(v, f"{where}.{k}", seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if id(value) in seen:
            raise ConfigError(f"{where}: the list contains itself")
        seen = seen | {id(value)}
        return [_plain(v, f"{where}[{i}]", seen) for i, v in enumerate(value)]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":  # np.float32(1e-3), np.array([...])
        return _plain(value.tolist(), where, seen)
    return value


def _reads_io(task: str) -> bool:
    """True for tasks whose rows go through `mmrlvr.data.io` (a column mapping): Arrow on disk."""
    from mmrlvr.tasks import task_module

    return hasattr(task_module(task), "COLUMNS")


def as_dataset(data: Any, what: str):
    """`data` (a `datasets.Dataset` or a list of dicts) as a Dataset with rows, else ConfigError."""
    import datasets

    if isinstance(data, (list, tuple)):
        if not all(isinstance(r, dict) for r in data):
            raise ConfigError(f"{what}: a list must hold dicts (one per row)")
        try:
            data = datasets.Dataset.from_list(list(data))
        except Exception as exc:  # noqa: BLE001 - pyarrow's ArrowInvalid/ArrowTypeError: name the column and rows
            raise ConfigError(f"{what}: {mixed_column(data) or f'cannot be made a table: {type(exc).__name__}: {exc}'}") from None
    if not isinstance(data, datasets.Dataset):
        raise ConfigError(f"{what}: expected a datasets.Dataset or a list of dicts, got {type(data).__name__}")
    if len(data) == 0:
        raise ConfigError(f"{what}: the dataset has no rows")
    return data


def _name(fn: Callable, i: int, taken: set) -> str:
    name = getattr(fn, "__name__", "") or ""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name in taken:
        name = f"reward_{i}"
    taken.add(name)
    return name


def pickled_rewards(rewards: Iterable) -> list[tuple[str, bytes, float]]:
    """(name, cloudpickle bytes, weight) of each reward, pickled by value; ConfigError naming a bad one.

    A reward is a callable (weight 1) or a `(callable, weight)` pair; its shape (mmrlvr's, TRL's or
    EasyR1's) is recognised here, before anything is staged, as a file plug-in's is at validation."""
    import math

    import cloudpickle

    from mmrlvr.verifiers.reward_styles import RewardSignatureError, reward_style

    if callable(rewards):  # one function, as TRL's reward_funcs takes it
        rewards = [rewards]
    if isinstance(rewards, (str, bytes, dict)) or not isinstance(rewards, Iterable):
        raise ConfigError(f"rewards: expected a callable or a list of callables (or (function, weight) pairs), "
                          f"got {short(rewards)}; a registered verifier is named in the config's rewards: instead")
    out, taken = [], set()
    for i, item in enumerate(rewards):
        fn, weight = item if isinstance(item, tuple) and len(item) == 2 else (item, 1.0)
        if not callable(fn):
            raise ConfigError(f"rewards[{i}]: {fn!r} is not callable; expected fn(completion, sample) -> float | Verdict, "
                              "TRL's fn(completions, **kwargs), or a (function, weight) pair")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ConfigError(f"rewards[{i}]: weight {weight!r}: expected a finite number")
        name = _name(fn, i, taken)
        try:
            reward_style(fn)
        except RewardSignatureError as exc:
            raise ConfigError(f"rewards[{i}] ({name}): {exc}") from None
        try:
            out.append((name, cloudpickle.dumps(fn), float(weight)))
        except Exception as exc:  # noqa: BLE001 - e.g. a closure over an open file or a lock
            raise ConfigError(f"rewards[{i}] ({name}): cannot be sent to the verifier workers: {exc}") from None
    return out


def mixed_column(rows: Sequence[dict]) -> str | None:
    """'column 'a': row 0 holds int, row 3 holds str ...' for the first column whose cells differ in
    kind (ints and floats count as numbers, null as any), else None."""
    def kind(v) -> str:
        return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__

    first: dict[str, tuple[int, str]] = {}
    for i, row in enumerate(rows):
        for col, value in row.items():
            if value is None:
                continue
            seen = first.setdefault(col, (i, kind(value)))
            if seen[1] != kind(value):
                return (f"column {col!r}: row {seen[0]} holds {seen[1]}, row {i} holds {kind(value)}; "
                        "give every row the same kind of value (e.g. all text)")
    return None


@dataclasses.dataclass
class Inputs:
    """The in-memory inputs of one `mmrlvr.run`, checked, nothing written yet."""
    train: Any = None  # datasets.Dataset
    eval: Any = None
    rewards: list[tuple[str, bytes, float]] = dataclasses.field(default_factory=list)  # name, pickle, weight
    arrow: bool = True  # save_to_disk (tasks reading through mmrlvr.data.io), else JSONL

    def empty(self) -> bool:
        return self.train is None and not self.rewards


def check_inputs(cfg: Config, train_data=None, eval_data=None, rewards=None) -> Inputs:
    """Everything about the in-memory inputs that can be wrong, named before the run directory is touched."""
    out = Inputs()
    if train_data is not None or eval_data is not None:
        from mmrlvr.tasks import task_module
        import inspect

        params = inspect.signature(task_module(cfg.task.name).build).parameters
        if "data" not in params:
            raise ConfigError(f"task {cfg.task.name!r} builds its own samples and takes no data; "
                              "train_data/eval_data need a task that reads rows (geometry, chart, grounding, "
                              "nextqa, temporal_grounding, generic or your own)")
        if train_data is None:
            raise ConfigError("eval_data without train_data: pass train_data (or set task.args.data)")
        if eval_data is not None and "eval_data" not in params:
            raise ConfigError(f"eval_data: task {cfg.task.name!r} reads no eval_data; it holds out "
                              "task.args.holdout_frac of train_data instead")
        out.arrow = _reads_io(cfg.task.name)
        out.train = as_dataset(train_data, "train_data")
        if eval_data is not None:
            out.eval = as_dataset(eval_data, "eval_data")
    out.rewards = pickled_rewards(rewards or [])
    return out


IN_MEMORY = {"train": "<train_data>", "eval": "<eval_data>"}  # what validation sees before staging


def as_validated(cfg: Config, train_data=None, eval_data=None) -> Config:
    """`cfg` as validation should see it before the in-memory rows are staged: `task.args.data`
    (and `eval_data`) stand for `train_data=` / `eval_data=`, which fill them for any task that
    reads rows (`generic` included). A task that reads none is left to `check_inputs` to name."""
    from mmrlvr.tasks import UnknownTask, task_module
    import inspect

    if train_data is None and eval_data is None:
        return cfg
    try:
        takes = inspect.signature(task_module(cfg.task.name).build).parameters
    except (UnknownTask, AttributeError, TypeError, ValueError):
        return cfg  # validation names the task
    args = dict(cfg.task.args)
    if "data" in takes and train_data is not None:
        args["data"] = IN_MEMORY["train"]
    if "eval_data" in takes and eval_data is not None:
        args["eval_data"] = IN_MEMORY["eval"]
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, args=args))


def in_memory_names(rewards) -> list[str]:
    """`rewards[i]` for each reward callable handed to `mmrlvr.run` (checked in `pickled_rewards`)."""
    if rewards is None:
        return []
    if callable(rewards):
        return ["rewards[0]"]
    if isinstance(rewards, (list, tuple)):
        return [f"rewards[{i}]" for i in range(len(rewards))]
    return []


def _write_data(data, tmp: Path, name: str, arrow: bool) -> str:
    """Write a Dataset into `tmp` as the task reads it; the file or folder name inside `tmp`."""
    if arrow:
        data.save_to_disk(str(tmp / name))
        return name
    data.to_json(str(tmp / f"{name}.jsonl"), lines=True)
    return f"{name}.jsonl"


def _write_rewards(rewards: list[tuple[str, bytes, float]], tmp: Path) -> None:
    lines = [_LOADER]
    for name, blob, _ in rewards:
        (tmp / f"{name}.pkl").write_bytes(blob)
        lines.append(f'{name} = cloudpickle.loads((_HERE / "{name}.pkl").read_bytes())\n')
    (tmp / "rewards.py").write_text("".join(lines))


def stage(cfg: Config, inputs: Inputs, root: Path, named_root: Path | None = None) -> tuple[Config, list[Path]]:
    """Write `inputs` into content-addressed folders under `root` (the caller holds the run lock):
    `cfg` naming them, and the folders this call created (not those it found already staged).

    `named_root`: the config names the folders there instead (a launch's other processes stage in
    a scratch folder only to learn the names the main process writes)."""
    root.mkdir(parents=True, exist_ok=True)
    named_root = named_root or root
    args, terms, created = dict(cfg.task.args), list(cfg.rewards), []

    def put(kind: str, write) -> Path:
        tmp = root / f".tmp-{os.getpid()}-{kind}"
        if tmp.exists():
            shutil.rmtree(tmp)  # a killed call of this process id: ours
        tmp.mkdir()
        inner = write(tmp)
        folder, new = commit(tmp, root, kind)
        if new:
            created.append(folder)
        return named_root / folder.name / inner if inner else named_root / folder.name

    if inputs.train is not None:
        args["data"] = str(put("train", lambda t: _write_data(inputs.train, t, "train", inputs.arrow)))
        if inputs.eval is not None:
            args["eval_data"] = str(put("eval", lambda t: _write_data(inputs.eval, t, "eval", inputs.arrow)))
    if inputs.rewards:
        folder = put("rewards", lambda t: _write_rewards(inputs.rewards, t))
        terms += [RewardTerm(f"{folder / 'rewards.py'}:{name}", weight) for name, _, weight in inputs.rewards]
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, args=args), rewards=terms), created


def prepare(cfg: Config, train_data=None, eval_data=None, rewards=None) -> Config:
    """`cfg` with the in-memory inputs staged under `<output_dir>/.mmrlvr_inputs/` and named in it
    (call it holding the run lock, as `run` does)."""
    return stage(cfg, check_inputs(cfg, train_data, eval_data, rewards), Path(cfg.output_dir) / STAGED)[0]


def _named_in(run_dir: Path) -> set[str]:
    """Names of the staged folders `<run_dir>/config.yaml` (the run there) refers to."""
    try:
        text = (run_dir / "config.yaml").read_text()
    except OSError:
        return set()
    return {staged_folder(m.group(0)).name for m in re.finditer(re.escape(STAGED) + r"/[a-z]+-[0-9a-f]{16}", text)
            if staged_folder(m.group(0)) is not None}


def _tidy(run_dir: Path, keep: Iterable[Path]) -> None:
    """Remove staged folders nothing refers to: not this call's, not named by the run's config.yaml."""
    root = run_dir / STAGED
    if not root.is_dir():
        return
    keep = {p.name for p in keep} | _named_in(run_dir)
    for entry in root.iterdir():
        if entry.name not in keep and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


def run(config: str | Path | dict | Config, *, train_data=None, eval_data=None,
        rewards: Callable | Sequence[Callable | tuple[Callable, float]] | None = None,
        overrides: Sequence[str] = ()) -> dict:
    """Train (warm start, RL, before/after evaluation) and return the run's summary.

    `config`: a YAML path, a dict or a `Config`; `overrides`: dotted "key=value" strings applied
    on top. `train_data`/`eval_data`: a `datasets.Dataset` or a list of dicts, read through the
    task's column mapping (no `eval_data`: a held-out slice of `train_data`). `rewards`: callables
    `fn(completion, sample) -> float | Verdict` (or TRL's `fn(completions, **kwargs)`, EasyR1's
    `compute_score`; one alone or a list), each a reward term of weight 1, or `(fn, weight)` pairs, added to the
    config's `rewards:`, run in the verifier pool under `verifier_timeout`. They are staged in
    `<output_dir>/.mmrlvr_inputs/` after the run lock is taken; a resume with other rows or
    rewards is refused like a changed config. Library progress bars (datasets, huggingface_hub,
    transformers) are off while it runs: the run's own bar says what matters.
    """
    from mmrlvr.models.quiet_bars import quiet_third_party_bars

    with quiet_third_party_bars():
        return _run(config, train_data, eval_data, rewards, overrides)


def _run(config, train_data, eval_data, rewards, overrides) -> dict:
    from mmrlvr.recipe.loop import train
    from mmrlvr.train.run_dir import RunDirError, acquire_lock, release_lock
    from mmrlvr.train.run_dir_paths import run_dir_problem
    from mmrlvr.checks.validate import validate_config

    cfg = as_config(config, overrides)
    # bad settings named before anything is written, knowing what the in-memory inputs will fill
    validate_config(as_validated(cfg, train_data, eval_data), in_memory_names(rewards))
    unsafe = run_dir_problem(cfg)  # someone else's files, a model inside the run's own: before anything is staged
    if unsafe:
        raise RunDirError(unsafe)
    inputs = check_inputs(cfg, train_data, eval_data, rewards)
    run_dir = Path(cfg.output_dir)
    if inputs.empty():
        return train(cfg)
    if int(os.environ.get("RANK", "0") or 0) != 0:  # another process of a launch: rank 0 writes the folders
        with tempfile.TemporaryDirectory() as scratch:
            staged, _ = stage(cfg, inputs, Path(scratch), named_root=run_dir / STAGED)
        return train(staged)
    acquire_lock(run_dir)  # before anything is written: a live run's directory stays as it is
    created: list[Path] = []
    try:
        staged, created = stage(cfg, inputs, run_dir / STAGED)
        _tidy(run_dir, [Path(staged_folder(p)) for p in _staged_paths(staged)])
        return train(staged)
    except BaseException:
        named = _named_in(run_dir)  # a run that got as far as config.yaml resumes on its folders
        for folder in created:
            if folder.name not in named:
                shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        release_lock(run_dir)


def _staged_paths(cfg: Config) -> list[str]:
    """The staged paths `cfg` names: task data and reward plug-in files."""
    values = [cfg.task.args.get("data"), cfg.task.args.get("eval_data"),
              *[t.verifier.rsplit(":", 1)[0] for t in cfg.rewards]]
    return [v for v in values if isinstance(v, str) and staged_folder(v) is not None]
