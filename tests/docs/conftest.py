"""The docs generators live in docs/ (beside the pages, not in the package): import them from there."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_docs_module(name: str):
    """docs/<name>.py as a module (cached in sys.modules under the same name the hook uses)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def gen_reference():
    return load_docs_module("gen_reference")


@pytest.fixture(scope="session")
def gen_metrics():
    return load_docs_module("gen_metrics")


def page(gen_reference, rel: str) -> str:
    """A docs page as the site shows it: markers replaced by their generated blocks."""
    return gen_reference.expand((DOCS / rel).read_text(encoding="utf-8"))
