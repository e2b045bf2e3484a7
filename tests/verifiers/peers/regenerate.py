"""Regenerate `math_verify_cases.json`: the (gold, prediction, expected) cases of Math-Verify's own suite.

Why: our `math` verifier must never score worse than math-verify alone, and must never pay an answer
math-verify's authors call wrong. Their suite is a test set nobody here wrote; this script reads it
from a checkout (a work tree or a bare git directory) without running its code, and records each case
with the settings the peer test used, so `test_math_verify_cases.py` can run them through ours.

    python tests/verifiers/peers/regenerate.py /path/to/Math-Verify [--check]

`--check` also runs every case through the installed `math-verify` with the peer's own settings and
fails unless it reproduces the expected value (it does for math-verify 0.9.0).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "math_verify_cases.json"
REPO = "huggingface/Math-Verify"
SETTINGS = ("match_types", "precision", "strict", "allow_set_relation_comp")


class Checkout:
    """Files of a Math-Verify checkout: a work tree, or a bare git directory read at HEAD."""

    def __init__(self, path: Path):
        self.path = path
        self.bare = not (path / "tests").is_dir()

    def git(self, *args: str) -> str:
        flag = ["--git-dir", str(self.path)] if self.bare else ["-C", str(self.path)]
        return subprocess.run(["git", *flag, *args], check=True, capture_output=True, text=True).stdout

    def read(self, rel: str) -> str:
        return self.git("show", f"HEAD:{rel}") if self.bare else (self.path / rel).read_text()

    def tests(self) -> list[str]:
        names = self.git("ls-tree", "-r", "--name-only", "HEAD", "tests").split()
        return sorted(n for n in names if n.endswith(".py") and Path(n).name.startswith("test_"))


def _value(node: ast.AST):
    """A literal of the peer's parametrize lists. One case is an f-string over `math.sqrt`: it is
    evaluated with `math` alone in scope and no builtins (never the peer's code as a whole)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        code = compile(ast.Expression(node), "<case>", "eval")
        return eval(code, {"__builtins__": {}, "math": math})  # noqa: S307 - one f-string, math only


def _call_settings(fn: ast.FunctionDef) -> tuple[str, dict]:
    """How the test compares: ("compare_strings", its keywords) or ("parse_verify", {})."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "compare_strings":
            kw = {}
            for k in node.keywords:
                kw[k.arg] = ("param", k.value.id) if isinstance(k.value, ast.Name) else _value(k.value)
            return "compare_strings", kw
    return "parse_verify", {}


def _settings(style: str, kw: dict, row: dict) -> dict:
    out = {"call": style}
    if style == "compare_strings":
        out.update({"match_types": ["latex", "expr"], "precision": 6, "strict": True, "allow_set_relation_comp": False})
    for k, v in kw.items():
        out[k] = row[v[1]] if isinstance(v, tuple) and v[0] == "param" else v
    return out


def _string_case(row: dict, config: ast.AST) -> dict:
    """A StringExtraction case (option letters): the gold is the letter the peer extracts; a
    prediction with no letter is a wrong answer to any letter (we use "A")."""
    expected = row["expected"]
    letters = "".join(ast.literal_eval(k.value)[0] for k in getattr(config, "keywords", []) if k.arg == "strings")
    return {"gold": expected[1] if expected else "A", "pred": row["pred"], "expected": int(bool(expected)),
            "kind": "choice", "settings": {"call": "string_extraction", **({"strings": letters} if letters else {})}}


def cases_of(rel: str, source: str) -> list[dict]:
    tree = ast.parse(source)
    out = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        if fn.name == "test_precision":  # one compare_strings call outside any parametrize list
            out.append({"id": f"{rel}::{fn.name}", "gold": "$\\frac{1}{3}$", "pred": "0.3333$", "expected": 1,
                        "kind": "math", "settings": _settings("compare_strings", {"precision": 4}, {})})
            continue
        style, kw = _call_settings(fn)
        for d in fn.decorator_list:
            if not (isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"):
                continue
            names = [n.strip() for n in ast.literal_eval(d.args[0]).split(",")]
            for i, elt in enumerate(d.args[1].elts):
                cid = f"{rel}::{fn.name}[{i}]"
                if names == ["pred", "expected", "config"]:
                    row = {"pred": _value(elt.elts[0]), "expected": _value(elt.elts[1])}
                    out.append({"id": cid, **_string_case(row, elt.elts[2])})
                    continue
                if "gold" not in names:
                    continue
                row = dict(zip(names, (_value(e) for e in elt.elts)))
                expected = row.get("expected", row.get("result"))
                out.append({"id": cid, "gold": row["gold"], "pred": row["pred"], "expected": int(expected),
                            "kind": "math", "settings": _settings(style, kw, row)})
    return out


def peer_score(case: dict) -> int:
    """What the installed math-verify says, with the settings the peer's test used."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig, parse, verify

    s = case["settings"]
    if s["call"] == "string_extraction":
        strings = tuple(s["strings"]) if "strings" in s else ("A", "B", "C", "D")
        got = parse(case["pred"], [StringExtractionConfig(strings=strings, lowercase=False)])
        return int(bool(got) and got[-1] == case["gold"])
    if s["call"] == "parse_verify":
        return int(verify(parse(case["gold"]), parse(case["pred"])))
    targets = [LatexExtractionConfig(boxed_match_priority=0) if t == "latex" else ExprExtractionConfig() for t in s["match_types"]]
    return int(verify(parse(case["gold"], targets), parse(case["pred"], targets), float_rounding=s["precision"],
                      strict=s["strict"], allow_set_relation_comp=s["allow_set_relation_comp"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="Math-Verify work tree or bare git directory")
    ap.add_argument("--check", action="store_true", help="the installed math-verify must reproduce every case")
    args = ap.parse_args(argv)
    repo = Checkout(args.checkout)
    commit = repo.git("rev-parse", "HEAD").strip()
    lines = repo.read("tests/test_all.py").splitlines()
    header = "\n".join(ln.lstrip("#").strip() for ln in lines[: next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))])
    cases = [c for rel in repo.tests() for c in cases_of(rel, repo.read(rel))]
    if args.check:
        wrong = [c["id"] for c in cases if peer_score(c) != c["expected"]]
        if wrong:
            print(f"math-verify does not reproduce {len(wrong)} cases: {wrong[:5]}", file=sys.stderr)
            return 1
    data = {
        "source": {"repo": f"https://github.com/{REPO}", "commit": commit, "path": "tests/",
                   "licence": "Apache-2.0 (repository LICENCE); tests/test_all.py carries the notice below",
                   "notice": header.strip(),
                   "regenerate": "python tests/verifiers/peers/regenerate.py <Math-Verify checkout> --check"},
        "cases": cases,
    }
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases from {REPO}@{commit[:12]} -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
