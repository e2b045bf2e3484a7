"""mmrlvr: reinforcement learning with verifiable rewards for vision-language models."""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["run"]


class _CheckoutTasks(importlib.abc.MetaPathFinder):
    """Finds `mmrlvr.tasks` in the top-level `tasks/` folder beside this package.

    An install maps `tasks/` to `mmrlvr.tasks` (setup.py's `package_dir`); a source checkout run with
    `PYTHONPATH=<checkout>` (the GPU machine, a clone next to an installed copy) has no such mapping, and
    an editable install of another checkout would otherwise lend its own `tasks/`. This finder makes
    `mmrlvr.tasks` always the `tasks/` that sits beside the `mmrlvr/` actually imported.
    """

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mmrlvr.tasks":
            return None
        return importlib.util.spec_from_file_location(
            fullname, self.folder / "__init__.py", submodule_search_locations=[str(self.folder)])


def _register_checkout_tasks() -> None:
    """Only where this package has no `tasks/` inside it (an installed copy has one) and the folder
    beside it is ours (`_catalogue.py`, not some other distribution's `tasks` package)."""
    here = Path(__file__).resolve().parent
    beside = here.parent / "tasks"
    if (here / "tasks").is_dir() or not (beside / "_catalogue.py").is_file():
        return
    if not any(isinstance(f, _CheckoutTasks) for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutTasks(beside))


_register_checkout_tasks()


def __getattr__(name: str):
    """`mmrlvr.run` is imported on first use, so `import mmrlvr` stays light (no torch)."""
    if name == "run":
        from mmrlvr.api import run

        return run
    raise AttributeError(f"module 'mmrlvr' has no attribute {name!r}")


def __dir__() -> list[str]:
    """`dir(mmrlvr)` shows the public API (`run`), which is looked up lazily and so is not yet in
    the module's namespace."""
    return sorted(set(globals()) | set(__all__))
