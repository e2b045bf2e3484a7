"""One lookup of a task name: `mmrlvr.checks.validate` accepts exactly the names training can load,
with each caller's error kept (KeyError for training and the CLI, one config line for validate)."""

from __future__ import annotations

import sys

import pytest

import mmrlvr.tasks as tasks
import mmrlvr.checks.validate as validate
from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors


def _task_line(name: str) -> list[str]:
    return [e for e in config_errors(load_config(None, [f"task.name={name}"])) if e.startswith("task.name=")]


def test_both_find_the_same_modules(tmp_path, monkeypatch):
    """A shipped task and a user's "package.module" resolve to the same module object from both."""
    (tmp_path / "my_lookup_pkg").mkdir()
    (tmp_path / "my_lookup_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_lookup_pkg" / "shapes.py").write_text("def build(split, size, seed):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("counting", "my_lookup_pkg.shapes"):
        assert validate.task_module(name) is tasks.task_module(name)
    assert tasks.task_module("my_lookup_pkg.shapes").__file__ == str(tmp_path / "my_lookup_pkg" / "shapes.py")
    assert _task_line("my_lookup_pkg.shapes") == []


def test_unknown_names_keep_each_callers_error():
    with pytest.raises(KeyError) as exc:
        tasks.task_module("no_such_task")
    assert exc.value.args[0] == "unknown task 'no_such_task': no module mmrlvr.tasks.no_such_task"
    with pytest.raises(ModuleNotFoundError, match=r"^no task module 'no_such_task'$"):
        validate.task_module("no_such_task")
    [line] = _task_line("no_such_task")
    assert line.startswith("task.name='no_such_task': a task module; known: cell_tally, chart, counting, ")
    assert line.endswith(", or package.module")


def test_a_task_outside_mmrlvr_tasks_is_refused_by_both(tmp_path, monkeypatch):
    """A bare name found only in some other top-level `tasks` package on sys.path (not installed as
    mmrlvr.tasks) cannot be loaded by training, so validation must not accept it either."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "stray_task.py").write_text("def build(split, size, seed):\n    return []\n")
    saved = {k: v for k, v in sys.modules.items() if k == "tasks" or k.startswith("tasks.")}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(KeyError):
            tasks.task_module("stray_task")
        with pytest.raises(ModuleNotFoundError):
            validate.task_module("stray_task")
        assert len(_task_line("stray_task")) == 1
    finally:
        for k in [k for k in sys.modules if k == "tasks" or k.startswith("tasks.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_a_task_with_a_missing_dependency_says_which(tmp_path, monkeypatch):
    """The task's own failed import is reported as itself, not as an unknown task name."""
    (tmp_path / "needs_dep_task.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for lookup in (tasks.task_module, validate.task_module):
        with pytest.raises(ModuleNotFoundError) as exc:
            lookup("needs_dep_task.sub")  # the package "needs_dep_task" itself fails to import
        assert exc.value.name == "no_such_dependency_xyz"
