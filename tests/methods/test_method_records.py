"""Methods are plug-ins: each folder of mmrlvr/methods/ registers one record of hooks, the recipe
calls the hooks, and the recipe, the learner and the engines name no method."""

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmrlvr.config import load_config
from mmrlvr.methods import HOOKS, METHODS, active
from mmrlvr.methods.hooks import Live, Method, only, register

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "mmrlvr"

# every file of the recipe, the learner's machinery and the rollout engines
NAMELESS = [*sorted((PKG / "recipe").glob("*.py")),
            *sorted((PKG / "train").glob("*.py")),  # the learner's machinery, every file of it
            *(PKG / "rollout" / f for f in ("base.py", "hf.py", "vllm.py", "server.py", "server_pool.py", "factory.py",
                                            "generation.py", "sampler.py", "lagged.py", "prefill.py", "vllm_inputs.py"))]
# the methods' names and the other words that name one (its paper's name, its config section)
ALIASES = ("thinktwice", "zoom", "pruner", "t-grpo", "cbrl", "sample_efficiency", "temporal contrast",
           "token weighting")


def method_folders() -> list[str]:
    return sorted(p.name for p in (PKG / "methods").iterdir() if (p / "__init__.py").is_file())


def test_every_method_named_by_the_house_has_a_folder_with_one_record():
    named = {"dbb", "replay", "demos", "temporal_contrast", "token_weighting", "prco", "hill", "refine", "tools",
             "arrol", "kawhi"}
    assert named <= set(method_folders())
    assert sorted(METHODS.names()) == method_folders()  # one record per folder, named as the folder
    for name in method_folders():
        record = METHODS.get(name)
        assert record.__module__ == "mmrlvr.methods.hooks" and (ROOT / "docs" / record.doc).is_file(), name
        assert importlib.import_module(f"mmrlvr.methods.{name}.method").METHOD is record, name  # its method.py's


def test_a_method_folder_package_is_its_docstring_alone():
    """A folder's `__init__` holds no code (its record and heavy imports are in its method.py), so
    importing one light module of a folder (its settings, its checks) loads nothing else."""
    for name in method_folders():
        tree = ast.parse((PKG / "methods" / name / "__init__.py").read_text())
        assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), name
        assert isinstance(tree.body[0].value, ast.Constant) and isinstance(tree.body[0].value.value, str), name


def test_importing_the_methods_and_every_folder_loads_no_torch_and_registers_nothing():
    """In a fresh process, `mmrlvr.methods` and each folder package are light: no torch, and the
    built-in records (`mmrlvr.methods.builtin`) wait for the first read of a table."""
    code = ("import json, sys, mmrlvr.methods; "
            + "".join(f"import mmrlvr.methods.{name}; " for name in method_folders())
            + "print(json.dumps(sorted(m for m in ('torch', 'mmrlvr.methods.builtin') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("path", NAMELESS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_recipe_the_learner_and_the_engines_name_no_method(path):
    words = [n for n in METHODS.names()] + [n.replace("_", " ") for n in METHODS.names()] + list(ALIASES)
    pattern = re.compile(r"(?<![a-z_])(" + "|".join(map(re.escape, words)) + r")(?![a-z_])", re.I)
    hits = [f"{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == [], f"{path.name} names a method:\n" + "\n".join(hits)


def test_the_word_check_would_see_a_method_named_in_the_recipe(tmp_path):
    """The check above is not blind: a line naming one, in code or a comment, is found."""
    words = METHODS.names() + list(ALIASES)
    pattern = re.compile(r"(?<![a-z_])(" + "|".join(map(re.escape, words)) + r")(?![a-z_])", re.I)
    assert pattern.search("    if cfg.sample_efficiency.arrol.enabled:")
    assert pattern.search("# HiLL: the best hint's re-rollouts") and pattern.search("uses_dbb(cfg)") is None
    assert pattern.search("dbb_options(cfg)") is None and pattern.search("x = dbb.lam")  # whole names only


def test_active_follows_the_config_in_registration_order():
    cfg = load_config(None, ["sample_efficiency.replay.enabled=true", "sample_efficiency.demos.enabled=true",
                             "token_weighting.diagnostics=false"])
    assert [m.name for m in active(cfg)] == ["replay", "demos"]
    cfg = load_config(None, ["rollout.episode=hill", "token_weighting.method=kawhi"])
    assert [m.name for m in active(cfg)] == ["hill", "token_weighting", "kawhi"]


def test_the_built_in_methods_register_in_the_hooks_order_and_so_list_their_episodes_weightings_and_estimators():
    """`mmrlvr.methods.builtin` alone fixes the order (the one the folders' own imports gave before:
    refine, hill, prco), and every table the folders fill follows it."""
    from mmrlvr.algos.advantages import ADVANTAGES
    from mmrlvr.algos.token_weights import METHODS as WEIGHTINGS
    from mmrlvr.checks.rules import METHOD_SETTINGS
    from mmrlvr.rollout.episode_registry import EPISODES

    order = ["replay", "demos", "dbb", "temporal_contrast", "refine", "hill", "prco", "tools", "arrol",
             "token_weighting", "kawhi"]
    built_in = lambda table: [n for n in table.in_order() if n in {*order, "single", "grpo", "none"}]  # noqa: E731 - other tests' throwaways left out
    assert built_in(METHODS) == order
    assert built_in(METHOD_SETTINGS) == ["replay", "demos", "dbb", "temporal_contrast", "arrol", "token_weighting", "kawhi"]
    assert built_in(EPISODES) == ["single", "refine", "hill", "prco", "tools"]
    assert built_in(WEIGHTINGS) == ["none", "kawhi"] and built_in(ADVANTAGES) == ["grpo", "dbb"]


def test_the_hook_points_are_a_closed_set_the_recipe_meets_in_order():
    assert HOOKS == ("check", "warn", "resolve", "launch", "source", "weights", "state", "generate", "learn", "collect", "estimator", "sync",
                     "record", "eval_rank")
    with pytest.raises(TypeError):
        Method("x", "index.md", on=bool, unknown_hook=print)  # a hook the recipe does not call is refused


def test_a_second_method_that_generates_rounds_is_refused_in_one_line(monkeypatch):
    """Two methods each generating the round themselves cannot both: one line names them."""
    from mmrlvr.methods import hooks

    items = METHODS.snapshot()
    monkeypatch.setattr(METHODS, "_items", items)
    register(Method("twin", "explanation/arrol.md", on=lambda cfg: True, generate=lambda *a: None,
                    state=lambda cfg, saved: None))
    cfg = load_config(None, ["sample_efficiency.arrol.enabled=true"])
    with pytest.raises(ValueError, match="methods arrol, twin each generate rounds"):
        Live.start(cfg, {}).generator()
    assert only(load_config(None, []), "weights").name == "token_weighting"
    assert hooks.only(load_config(None, ["token_weighting.diagnostics=false"]), "weights") is None
    with pytest.raises(ValueError, match="already registered"):
        register(Method("arrol", "explanation/arrol.md", on=bool))


def test_a_method_state_is_saved_under_its_name_and_read_back():
    """The checkpoint keeps each method's state at the top of state.json under the method's name
    (the format a checkpoint of arrol already had), and a resume hands it back to that method."""
    from mmrlvr.recipe.run_state import RunState

    saved = {"step": 3, "eval_before": None, "warm_start": None, "source": {"kind": "seeded_stream", "pos": 4},
             "prompt_stats": {}, "arrol": {"head": {"w": [1.0]}}}
    state = RunState.from_dict(saved)
    assert state.methods == {"arrol": {"head": {"w": [1.0]}}} and state.to_dict() == saved
    assert "arrol" not in RunState.from_dict({**saved, "arrol": {}}).to_dict()  # an empty state is not written


def test_the_methods_page_lists_every_method_with_its_tier():
    """docs/explanation/methods.md has one table row per registered method, with the record's tier."""
    rows = {}
    for line in (ROOT / "docs" / "explanation" / "methods.md").read_text().splitlines():
        m = re.match(r"\| `(\w+)`[^|]*\|[^|]*\|[^|]*\| (stable|experimental) \|", line)
        if m:
            rows[m.group(1)] = m.group(2) == "experimental"
    assert rows == {name: METHODS.get(name).experimental for name in METHODS.names()}
