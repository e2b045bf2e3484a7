"""The generated parts of the Reference pages, rendered from the code at build time so they cannot drift.

A page marks where a generated block goes with an HTML comment on its own line,
`<!-- reference:NAME -->`; `expand(markdown)` replaces each marker with `RENDERERS[NAME]()`.
The mkdocs hook (`docs/hooks.py`) calls `expand` on every page, and the tests in `tests/docs/`
call it too, so what they check is what the site shows.

The config tables read the same dataclasses and field docstrings that `mmrlvr config --show`
prints (`mmrlvr.checks.reference.field_docs`), the verifier table reads the verifier registry and runs
each verifier on a small example, and the fault list reads `benchmarks/results/faults.json`. The metric names live in
`gen_metrics.py`, the CLI tables (read from the real argparse parser) in `gen_cli.py`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- reference:([a-z0-9-]+) -->$", re.M)


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell: no newlines, pipes escaped, tags shown literally
    (`<answer>` outside backticks is escaped; inside a code span it is already literal)."""
    s = " ".join(str(text).split())
    pieces = re.split(r"(`[^`]+`)", s)
    for i, piece in enumerate(pieces):
        if not (piece.startswith("`") and piece.endswith("`") and len(piece) > 1):
            pieces[i] = piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return "".join(pieces)  # a pipe inside a code span does not split a cell (Python-Markdown's tables)


def prose(doc: str) -> list[str]:
    """A docstring as Markdown paragraphs: lines of a paragraph joined, `- item` lines kept as a list
    (a blank line before it, as Python-Markdown needs), tags outside backticks shown literally."""
    out = []
    for para in doc.split("\n\n"):
        chunks: list[list[str]] = []  # each: the lines of one text run or one list item
        for line in para.splitlines():
            if re.match(r"\s*([-*]|\d+\.) ", line) or not chunks:
                chunks.append([line])
            else:
                chunks[-1].append(line)
        text, items = [], []
        for chunk in chunks:
            joined = cell(" ".join(chunk))
            (items if re.match(r"([-*]|\d+\.) ", joined) else text if not items else items).append(joined)
        block = "\n".join(text)
        if items:
            block = (block + "\n\n" if block else "") + "\n".join(items)
        if block.strip():
            out.append(block + "\n")
    return out


def code(text: object) -> str:
    """Inline code in a table cell (a backtick-safe fence; a pipe inside it does not split the cell)."""
    s = " ".join(str(text).split())
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


# ------------------------------------------------------------------------------------ config keys

def _type_name(tp: object) -> str:
    """`int`, `float | None`, `list[str]`: the annotation as a person writes it."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "").replace("mmrlvr.config.", "").replace("NoneType", "None")


def config_rows(cls: type | None = None, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, doc) of every config key, sections walked in declaration order.

    `rewards` is a list of `RewardTerm`s: its fields are listed as `rewards[].verifier`, ...
    `task.args` depends on the task and is listed per task by `task_args_rows`."""
    from mmrlvr.config import Config, RewardTerm
    from mmrlvr.checks.reference import _flow, field_docs

    cls = cls or Config
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    default = cls()
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        value = getattr(default, f.name)
        if dataclasses.is_dataclass(value):
            rows.extend(config_rows(type(value), key + "."))
            continue
        shown = _flow(dataclasses.asdict(default)[f.name])
        rows.append((key, _type_name(hints[f.name]), shown, docs.get(f.name, "")))
        if key == "rewards":
            rows.extend(config_rows(RewardTerm, "rewards[]."))
    return rows


def section_docs(cls: type | None = None, prefix: str = "") -> dict[str, str]:
    """Dotted section -> the doc under its field (if any) and its dataclass's docstring, nested
    sections included (`sample_efficiency.replay`)."""
    from mmrlvr.config import Config
    from mmrlvr.checks.reference import field_docs

    cls = cls or Config
    out = {}
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        value = getattr(cls(), f.name)
        if dataclasses.is_dataclass(value):
            own = " ".join((type(value).__doc__ or "").split())
            if own.startswith(f"{type(value).__name__}("):  # the signature dataclass writes when there is no docstring
                own = ""
            out[prefix + f.name] = " ".join(x for x in (docs.get(f.name, ""), own) if x)
            out.update(section_docs(type(value), f"{prefix}{f.name}."))
    return out


def render_config_keys() -> str:
    sections: dict[str, list] = {}
    for row in config_rows():
        parent = row[0].rsplit(".", 1)[0] if "." in row[0] and not row[0].startswith("rewards[]") else "top-level"
        sections.setdefault(parent, []).append(row)
    docs = section_docs()
    out, done = [], set()
    for name, items in sections.items():
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # a section holding only sub-sections gets its heading too
            head = ".".join(parts[:depth])
            if head not in done:
                done.add(head)
                out.append(f"{'#' * (1 + depth)} {head}\n")
                if docs.get(head):
                    out.append(cell(docs[head]) + "\n")
        out.append("| key | type | default | what it does |\n|---|---|---|---|")
        out += [f"| {code(k)} | {code(t)} | {code(d)} | {cell(doc)} |" for k, t, d, doc in items]
        if name == "task":
            out.append(f"| {code('task.args')} | `dict` | `{{}}` | the chosen task's arguments: "
                       "[task.args per task](#taskargs-per-task) |")
        out.append("")
    return "\n".join(out)


def task_args_rows() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """task name -> (module docstring, [(task.args.KEY, default)]): what `mmrlvr tasks` lists."""
    from mmrlvr.checks.reference import _flow
    from mmrlvr.tasks import task_module
    from mmrlvr.tasks._catalogue import DEPRECATED, FROM_CONFIG, arguments, task_names

    out = {}
    for name in task_names():
        module = task_module(name)
        rows = []
        for arg, default in arguments(module).items():
            if arg in DEPRECATED:
                continue
            if arg in FROM_CONFIG:
                shown = f"from {FROM_CONFIG[arg]}"
            elif default is inspect.Parameter.empty:
                shown = "required"
            else:
                shown = _flow(default)
            rows.append((f"task.args.{arg}", shown))
        out[name] = (inspect.getdoc(module) or "", rows)
    return out


def render_task_args() -> str:
    out = []
    for name, (doc, rows) in task_args_rows().items():
        out.append(f"### {name}\n")
        out += prose(doc)
        out.append("| key | default |\n|---|---|")
        out += [f"| {code(k)} | {code(v)} |" for k, v in rows]
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------ verifiers

# name -> (completion, reference, meta): one example per built-in verifier, scored at build time
EXAMPLES: dict[str, tuple[str, object, dict]] = {
    "count": ("<think>two red circles, one red square</think><answer>3</answer>", 3, {}),
    "math": ("<answer>\\frac{1}{2}</answer>", "0.5", {}),
    "choice": ("The answer is (B).", "B", {"options": ["12", "15", "20"]}),
    "number": ("<answer>1,020</answer>", 1000, {"rel_tol": 0.05}),
    "exact": ("<answer>The Eiffel Tower.</answer>", "eiffel tower", {}),
    "iou": ("<answer>[10, 10, 50, 50]</answer>", [20, 20, 60, 60], {}),
    "boxes": ("<answer>[[0, 0, 10, 10], [20, 20, 30, 30]]</answer>", [[0, 0, 10, 10], [40, 40, 50, 50]], {}),
    "order": ("<answer>C, A, B</answer>", ["C", "B", "A"], {}),
    "tiou": ("<answer>from 2.0 to 6.0 seconds</answer>", [4.0, 8.0], {}),
    "format": ("<think>three</think><answer>3</answer>", None, {}),
}


def verifier_rows() -> list[dict]:
    """One dict per registered verifier: name, module, description, headline metric, docstring and
    the verdict of its example (score, reason, parts), computed now with the real function."""
    from mmrlvr.types import Sample
    from mmrlvr.verifiers.base import VERIFIERS, available_verifiers, safe_verify

    rows = []
    for name, text in available_verifiers().items():
        fn = VERIFIERS.get(name) if name in VERIFIERS else None
        row = {"name": name, "description": text, "module": getattr(fn, "__module__", ""),
               "headline": getattr(fn, "eval_metric", ""),
               "doc": inspect.getdoc(fn) or "" if fn else ""}
        if fn is not None and name in EXAMPLES:
            completion, reference, meta = EXAMPLES[name]
            verdict = safe_verify(fn, completion, Sample("example", (), reference, name, meta=meta))
            row["example"] = (completion, reference, meta, verdict)
        rows.append(row)
    return rows


def _headline(row: dict) -> str:
    return code(row["headline"]) if row["headline"] else "none (a reward term only, e.g. a format bonus)"


def render_verifiers() -> str:
    rows = verifier_rows()
    out = ["| name | what scores 1 | headline metric in evaluations |", "|---|---|---|"]
    out += [f"| [{code(r['name'])}](#{r['name']}) | {cell(r['description'])} | {_headline(r)} |" for r in rows]
    out.append("")
    for r in rows:
        out.append(f"## {r['name']}\n\n{cell(r['description'])}\n")
        out.append(f"Defined in `{r['module']}`; headline metric {_headline(r)}.\n")
        if r["doc"]:
            out += prose(r["doc"])
        if "example" in r:
            completion, reference, meta, v = r["example"]
            parts = ", ".join(f"`{k}` = {x:g}" for k, x in sorted(v.parts.items())) or "(none)"
            out.append("| example | |\n|---|---|")
            out.append(f"| completion | {code(completion)} |")
            out.append(f"| reference | {code(json.dumps(reference))} |")
            if meta:
                out.append(f"| meta | {code(json.dumps(meta))} |")
            out.append(f"| score | {v.score:g} |")
            out.append(f"| reason | {cell(v.reason) or '(empty)'} |")
            out.append(f"| parts (logged as `reward/{r['name']}/<part>`) | {parts} |\n")
    return "\n".join(out)


# ------------------------------------------------------------------------------------ Python API

API = [  # (import path, object name): the functions a notebook or script uses
    ("mmrlvr.api", "run"), ("mmrlvr.api", "as_config"), ("mmrlvr.config", "load_config"),
    ("mmrlvr.checks.validate", "validate_config"), ("mmrlvr.checks.reference", "describe_config"),
    ("mmrlvr.tasks", "load_task"), ("mmrlvr.verifiers.base", "register_verifier"),
    ("mmrlvr.verifiers.base", "resolve_verifier"), ("mmrlvr.types", "Sample"), ("mmrlvr.types", "Verdict"),
    ("mmrlvr.viz.curves", "plot_curves"), ("mmrlvr.viz.boxes", "draw_prediction"),
    ("mmrlvr.viz.tokens", "read_token_roles"), ("mmrlvr.viz.tokens", "plot_token_roles"),
    ("mmrlvr.viz.attention", "token_attention"), ("mmrlvr.viz.figure", "save_figure"),
]


class _Shown(str):
    """An annotation shown as written (inspect prints a plain string annotation with quotes)."""

    def __repr__(self) -> str:
        return str(self)


def _signature(obj) -> str:
    """`(a: int, b: str = 'x') -> Config`, one parameter per line when it would not fit in 80 columns;
    annotations evaluated (the modules use `from __future__ import annotations`) when they can be."""
    try:
        try:
            sig = inspect.signature(obj, eval_str=True)
        except Exception:  # noqa: BLE001 - an annotation that names a TYPE_CHECKING-only import
            sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    shown = [p.replace(annotation=_Shown(_type_name(p.annotation))) if p.annotation is not p.empty else p
             for p in sig.parameters.values()]
    ret = sig.empty if inspect.isclass(obj) or sig.return_annotation is sig.empty else _Shown(_type_name(sig.return_annotation))
    sig = sig.replace(parameters=shown, return_annotation=ret)
    if len(str(sig)) <= 80:
        return str(sig)
    params = [str(p) for p in shown]
    star = next((i for i, p in enumerate(shown) if p.kind == p.KEYWORD_ONLY), None)
    if star is not None and not any(p.kind == p.VAR_POSITIONAL for p in shown):
        params.insert(star, "*")
    return "(\n" + "".join(f"    {p},\n" for p in params) + ")" + (f" -> {ret}" if ret is not sig.empty else "")


def render_python_api() -> str:
    import importlib

    out = []
    for module, name in API:
        obj = getattr(importlib.import_module(module), name)
        kind = "class" if inspect.isclass(obj) else "def"
        out.append(f"## {module}.{name}\n\n```python\n{kind} {name}{_signature(obj)}\n```\n")
        doc = inspect.getdoc(obj) or ""
        if doc and not doc.startswith(f"{name}("):  # not the signature dataclass writes for itself
            out += prose(doc)
    return "\n".join(out)


# ------------------------------------------------------------------------------------ faults

def render_fault_cases() -> str:
    data = json.loads((ROOT / "benchmarks" / "results" / "faults.json").read_text())
    counts = "; ".join(f"{k}: {v}" for k, v in data["counts"].items())
    out = [f"Last recorded run (`benchmarks/results/faults.json`): {counts}.\n",
           "| case | outcome | seconds |", "|---|---|---|"]
    out += [f"| {cell(c['case'])} | {cell(c['outcome'] + (': ' + c['why'] if c.get('why') else ''))} | {c['seconds']} |"
            for c in data["cases"]]
    return "\n".join(out) + "\n"


def render_resumable_keys() -> str:
    from mmrlvr.train.run_dir import RESUMABLE

    return "\n".join(f"- `{k}`" for k in sorted(RESUMABLE)) + "\n"


def _sibling(name: str):
    """docs/<name>.py, imported once by file path (mkdocs loads this file as a hook, not a package)."""
    import importlib.util
    import sys

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def render_metrics() -> str:
    return _sibling("gen_metrics").render_metrics()


def render_cli() -> str:
    return _sibling("gen_cli").render_cli()


RENDERERS: dict[str, Callable[[], str]] = {
    "config-keys": render_config_keys,
    "task-args": render_task_args,
    "verifiers": render_verifiers,
    "cli": render_cli,
    "python-api": render_python_api,
    "fault-cases": render_fault_cases,
    "metrics": render_metrics,
    "resumable-keys": render_resumable_keys,
}


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fenced_blocks(markdown: str) -> list[dict]:
    """Every fenced code block: `start` (line index of its opening fence), `end` (of its closing
    fence), `info` (the info string, e.g. "yaml"), `body` and `before` (the nearest non-blank line
    above it). A fence closes only with the same character, at least as long, so a ```` block can
    show ``` examples."""
    lines = markdown.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, j = m.group(1), m.group(2).strip(), i + 1
        while j < len(lines):
            c = FENCE.match(lines[j])
            if c and c.group(1)[0] == fence[0] and len(c.group(1)) >= len(fence) and not c.group(2).strip():
                break
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        out.append({"start": i, "end": j, "info": info, "body": "\n".join(lines[i + 1:j]),
                    "before": lines[k].strip() if k >= 0 else ""})
        i = j + 1
    return out


def expand(markdown: str) -> str:
    """Replace every `<!-- reference:NAME -->` line outside code blocks with its generated block;
    an unknown NAME raises."""
    lines = markdown.split("\n")
    inside = {n for b in fenced_blocks(markdown) for n in range(b["start"], b["end"] + 1)}
    for n, line in enumerate(lines):
        m = MARKER.match(line)
        if m and n not in inside:
            if m.group(1) not in RENDERERS:
                raise KeyError(f"unknown generated block {m.group(1)!r}; known: {', '.join(sorted(RENDERERS))}")
            lines[n] = RENDERERS[m.group(1)]().rstrip() + "\n"
    return "\n".join(lines)
