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
    # settings and plain records every layer reads (the config package: schema, keys, limits, loading)
    {"types", "config", "registry", "jsonl"},
    # data in, models, verifiers, RL math: none knows about training (models/patches too: the memory
    # patches of the forward, which training enters around its own forward)
    {"data", "models", "verifiers", "algos"},
    # task definitions (built from data + verifiers); viz draws what the layers below produce
    # (a leaf for notebooks: it never imports training code)
    {"tasks", "viz"},
    {"rollout"},
    # a whole config checked (tasks, verifiers, algos, episodes) before training; the rendered reference
    {"checks"},
    {"plan"},  # sizes a validated config's memory from its model's config alone (`mmrlvr plan`)
    {"train"},  # the learner's machinery: log-probs, micro-batches, precision, checkpoints, distributed
    {"methods"},  # each method's folder: the hooks it fills (mmrlvr/methods/hooks.py)
    {"recipe"},  # the loop, the step, the run and its state: calls the methods' hooks, names none
    {"api", "cli"},  # the user-facing edge
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


def graph_files() -> list[tuple[str, Path]]:
    """package_files() plus the benchmark scripts as `benchmarks.<purpose>.<name>` (they import the
    shared `benchmarks.common` and each other by full name, with the repository root on the path)."""
    bench = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        bench.append((".".join(parts).removesuffix(".__init__"), path))
    return package_files() + bench


def all_imports(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """Known modules this one imports anywhere (inside functions too: a lazy import that closes a
    circle is still a circle, it only fails later), each resolved to the closest known module;
    `from pkg import mod` counts `pkg.mod`."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        targets = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            got = imported(ast.Module(body=[node], type_ignores=[]), module, is_package)
            targets = [t for _, t in got] or [node.module or ""]
            targets += [f"{t}.{a.name}" for t in list(targets) for a in node.names]
        for t in targets:
            while t not in modules and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in modules:
                out.add(t)
    return out - {module}


def import_graph() -> dict[str, set[str]]:
    files = graph_files()
    modules = {m for m, _ in files}
    return {m: all_imports(ast.parse(p.read_text(), str(p)), m, p.name == "__init__.py", modules) for m, p in files}


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
    """No module needs a module that needs it back, lazily or not, in mmrlvr/, tasks/ or benchmarks/:
    a circle is what makes `python -c "import X"` fail in a fresh interpreter for some X."""
    assert import_circles(import_graph()) == []


def test_the_circle_check_sees_lazy_benchmark_imports():
    """Two modules that import each other only inside functions are a circle; a benchmark script's
    lazy import of another counts; `from pkg import mod` points at the module."""
    assert import_circles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    mods = {"benchmarks.common", "benchmarks.speed.vs_trl", "mmrlvr.data", "mmrlvr.data.media", "mmrlvr.train"}
    tree = ast.parse("def f():\n    from benchmarks.speed.vs_trl import SHAPES\n")
    assert all_imports(tree, "benchmarks.common", False, mods) == {"benchmarks.speed.vs_trl"}
    tree = ast.parse("from mmrlvr.data import media\ndef f():\n    import mmrlvr.train.loop\n")
    assert all_imports(tree, "mmrlvr.data.video", False, mods) == {"mmrlvr.data", "mmrlvr.data.media", "mmrlvr.train"}


FRESH = """
import importlib, sys
sys.path.append({root!r})
bad = []
for name in sys.argv[1:]:
    for m in [m for m in sys.modules if m.split(".")[0] in ("mmrlvr", "benchmarks", *{stems})]:
        del sys.modules[m]  # each of ours imported as if first, third-party modules kept (speed)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mmrlvr", "benchmarks", *{stems}):  # a bare `common` too
            bad.append(f"{{name}}: {{exc}}")
    except ImportError as exc:
        bad.append(f"{{name}}: {{exc}}")
print("\\n".join(bad))
"""


def test_every_module_imports_first_in_a_fresh_interpreter():
    """`import X` works for every module X when X is the first of ours imported (a circle at load
    time fails with "partially initialized module"); a third-party package not installed here is not
    ours to judge. One interpreter, our modules dropped from sys.modules before each import."""
    import subprocess
    import sys

    names = [m for m, _ in graph_files()]
    stems = sorted({p.stem for m, p in graph_files() if m.startswith("benchmarks.")} - {"__init__"})
    script = FRESH.format(root=str(ROOT), stems=stems)
    run = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "", "modules that fail to import first:\n" + run.stdout


FILE_LINES = 400  # most lines of a module anywhere in mmrlvr/
TRAIN_FUNCTION_LINES = 60  # most lines of a function or method of the training package (def line to its last line)
TRAINING_FOLDERS = ("train", "methods", "recipe")  # the learner's machinery, the methods, the recipe
OVER_BUDGET: set[str] = set()  # "path:function" tolerated over the budget (none today)


def over_budget() -> list[str]:
    """Files of mmrlvr/ longer than FILE_LINES, functions of the training folders longer than TRAIN_FUNCTION_LINES."""
    bad = []
    for _, path in package_files():
        rel = path.relative_to(ROOT)
        if rel.parts[0] != "mmrlvr":
            continue
        text = path.read_text()
        if (n := len(text.splitlines())) > FILE_LINES:
            bad.append(f"{rel}: {n} lines (at most {FILE_LINES})")
        if rel.parts[1] not in TRAINING_FOLDERS:
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > TRAIN_FUNCTION_LINES and f"{rel}:{node.name}" not in OVER_BUDGET:
                    bad.append(f"{rel}:{node.lineno}: {node.name} is {n} lines (at most {TRAIN_FUNCTION_LINES})")
    return bad


def test_files_and_training_functions_stay_within_their_size_budgets():
    """A module of mmrlvr/ is at most 400 lines and a function of mmrlvr/train/ at most 60: past
    that, split by what the parts do (a sibling module, named helpers), never by packing lines."""
    bad = over_budget()
    assert not bad, "over the size budget:\n" + "\n".join(bad)


def house() -> dict:
    """The house in numbers, for notes on a change of layout: files per folder, imports that point
    to a higher layer, circles (`python tests/test_layers.py`)."""
    from collections import Counter

    folders = Counter(str(p.parent.relative_to(ROOT)) for _, p in graph_files())
    return {"files_per_folder": dict(sorted(folders.items())), "back_arrows": len(upward_imports()),
            "circles": import_circles(import_graph())}


if __name__ == "__main__":
    import json

    print(json.dumps(house(), indent=1))
