"""No module imports a higher layer: a lower layer stays usable (and testable) without the ones above it.

Walks every file of the package with `ast` (imports inside functions count too: a lazy import is
still a dependency). The top-level `tasks/` folder is walked as `mmrlvr.tasks`, the name it is
installed under. Modules of one layer may import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = [
    # settings and plain records every layer reads
    {"types", "config", "config_efficiency", "config_limits", "config_methods", "registry", "jsonl"},
    # data in, models, verifiers, RL math: none knows about training
    {"data", "models", "verifiers", "algos"},
    # task definitions (built from data + verifiers); viz draws what the layers below produce
    # (a leaf for notebooks: it never imports training code)
    {"tasks", "viz"},
    {"rollout"},
    {"validate", "validate_rules"},  # checks a whole config (tasks, verifiers, algos) before training
    {"train"},
    # the user-facing edge; config_docs renders `mmrlvr config --show`, task arguments included
    {"api", "cli", "config_docs"},
    {"__init__"},  # the package itself re-exports the api
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """"mmrlvr.train.logprobs" -> "train"; "mmrlvr" (the package) -> "__init__"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_files() -> list[tuple[str, Path]]:
    """(module name, file) of every module of mmrlvr, tasks/ included as mmrlvr.tasks."""
    out = []
    for folder, package in ((ROOT / "mmrlvr", "mmrlvr"), (ROOT / "tasks", "mmrlvr.tasks")):
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            out.append((name, path))
    return out


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported mmrlvr module) of every import statement, relative ones resolved."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*anchor, base] if base else anchor)
            if base == "mmrlvr":  # from mmrlvr import api: the names are the modules
                out += [(node.lineno, f"mmrlvr.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return [(line, name) for line, name in out if name == "mmrlvr" or name.startswith("mmrlvr.")]


def upward_imports() -> list[str]:
    bad = []
    for module, path in package_files():
        src = unit_of(module)
        for line, target in imported(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"):
            dst = unit_of(target)
            if LAYER[dst] > LAYER[src]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {src} (layer {LAYER[src]}) imports {target} "
                           f"({dst}, layer {LAYER[dst]})")
    return bad


def test_every_unit_has_a_layer():
    """A new top-level module or subpackage must be placed in LAYERS (else the check below cannot judge it)."""
    units = {unit_of(m) for m, _ in package_files()}
    assert units - set(LAYER) == set(), "add these to LAYERS"


def test_no_module_imports_a_higher_layer():
    bad = upward_imports()
    assert not bad, "lower layers import higher ones:\n" + "\n".join(bad)


def test_the_walk_sees_lazy_and_relative_imports():
    """The walk reads imports inside functions and resolves relative ones (so neither hides an upward import)."""
    tree = ast.parse("def f():\n    from mmrlvr.train.learner import Learner\nfrom . import heatmap\nfrom ..train import step\n")
    got = imported(tree, "mmrlvr.viz.attention", is_package=False)
    assert sorted(got) == [(2, "mmrlvr.train.learner"), (3, "mmrlvr.viz"), (4, "mmrlvr.train")]
