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
    {"types", "config", "config_keys", "config_efficiency", "config_limits", "config_methods", "config_rollout", "registry", "jsonl"},
    # data in, models, verifiers, RL math: none knows about training
    {"data", "models", "verifiers", "algos"},
    # task definitions (built from data + verifiers); viz draws what the layers below produce
    # (a leaf for notebooks: it never imports training code)
    {"tasks", "viz"},
    {"rollout"},
    {"validate", "validate_rules", "validate_bounds", "validate_task", "validate_notes", "validate_arrol"},  # checks a whole config (tasks, verifiers, algos) before training
    {"plan"},  # sizes a validated config's memory from its model's config alone (`mmrlvr plan`)
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


def load_time_imports(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """mmrlvr modules this one imports while it is being imported: statements at module level or in
    a class body (an import inside a function runs later, so it cannot close a circle); `from
    pkg import name` counts `pkg.name` when that is a module."""
    top = ast.Module(body=[], type_ignores=[])
    stack = list(tree.body)
    while stack:  # module level, and inside if/try/with/class blocks, but not functions
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top.body.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
    out = set()
    for node in top.body:
        names = [a.name for a in node.names]
        for _, target in imported(ast.Module(body=[node], type_ignores=[]), module, is_package):
            out.add(target)
            if isinstance(node, ast.ImportFrom):
                out |= {f"{target}.{n}" for n in names if f"{target}.{n}" in modules}
    return out & modules


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted: a circle of imports."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    """No module needs, while it loads, a module that needs it back: `python -c "import X"` works for
    every X in a fresh interpreter, whichever module is imported first."""
    files = package_files()
    modules = {m for m, _ in files}
    graph = {m: load_time_imports(ast.parse(p.read_text(), str(p)), m, p.name == "__init__.py", modules) - {m}
             for m, p in files}
    assert import_circles(graph) == []
    # the check finds a circle of two (media <-> video, as once) and one through a `from pkg import mod`
    assert import_circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    tree = ast.parse("from mmrlvr.data import media\ndef f():\n    import mmrlvr.train\n")
    assert load_time_imports(tree, "mmrlvr.data.video", False, {"mmrlvr.data.media", "mmrlvr.train"}) == {"mmrlvr.data.media"}
