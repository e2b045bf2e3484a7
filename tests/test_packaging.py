"""The install declares only extras that its dependencies publish (pip warns on every install
otherwise, and pip 23 compares extra names verbatim, without normalising `_` to `-`)."""

import tomllib
from importlib.metadata import PackageNotFoundError, metadata
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _requirements():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    deps = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        deps += extra
    return [Requirement(d) for d in deps]


def missing_extras(req: Requirement) -> set:
    """Extras `req` asks for that its installed distribution does not publish under that spelling."""
    try:
        provided = set(metadata(req.name).get_all("Provides-Extra") or [])
    except PackageNotFoundError:
        return set()  # an optional extra's package that is not installed here (vllm)
    return set(req.extras) - provided


def test_the_old_spelling_is_caught():
    # the spelling that made every install warn, and the one math-verify 0.9.0 publishes
    assert missing_extras(Requirement("math-verify[antlr4_13_2]")) == {"antlr4_13_2"}
    assert missing_extras(Requirement("math-verify[antlr4-13-2]")) == set()


def test_every_requested_extra_exists_as_spelled():
    for req in _requirements():
        assert not missing_extras(req), f"{req}: {req.name} does not publish {sorted(missing_extras(req))}"


def test_math_verify_antlr_runtime_is_the_one_its_parser_supports():
    # latex2sympy2_extended 1.11 accepts antlr4 runtimes 4.9.3 to 4.13.2; the pin must be inside
    pins = {r.name: r for r in _requirements()}
    runtime = pins["antlr4-python3-runtime"]
    supported = [r for r in (Requirement(x) for x in metadata("latex2sympy2_extended").get_all("Requires-Dist"))
                 if r.name == "antlr4-python3-runtime" and not r.marker]
    version = next(iter(runtime.specifier)).version
    assert supported and supported[0].specifier.contains(version), (runtime, supported)


ROOT = PYPROJECT.parent


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def unpinned(requirements, constraints_text: str) -> list[str]:
    """Names among `requirements` (core and every extra the README's commands install) that
    `constraints.txt` does not pin to one version."""
    pinned = {_norm(line.split("==")[0]) for line in constraints_text.splitlines()
              if "==" in line and not line.lstrip().startswith("#")}
    return sorted({_norm(r.name) for r in requirements if _norm(r.name) != "mmrlvr"
                   and (r.marker is None or r.marker.evaluate())} - pinned)


def test_every_dependency_the_commands_install_is_pinned():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = project["optional-dependencies"]
    reqs = [Requirement(d) for d in project["dependencies"] + extras["dev"] + extras["docs"]]
    assert unpinned(reqs, (ROOT / "constraints.txt").read_text()) == []
    assert unpinned([Requirement("pytest>=8")], "# pytest==9.0.3\nhypothesis==6.1\n") == ["pytest"]


def test_readme_and_ci_install_with_the_constraints():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    for text in (readme, ci):
        for line in text.splitlines():
            if line.startswith("pip install") and "-e " in line:
                assert "-c constraints.txt" in line, line
    assert 'pip install torch==2.14.1 torchvision==0.29.1 -c constraints.txt -e ".[dev]" && python -m pytest -q' in ci
