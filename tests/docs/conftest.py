"""The docs generators live in docs/ (beside the pages, not in the package): import them from there."""

import importlib.util
import json
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


_PAGES: dict[str, str] = {}


def page(gen_reference, rel: str) -> str:
    """A docs page as the site shows it: markers replaced by their generated blocks (rendered once
    per session: the code does not change while the tests run)."""
    if rel not in _PAGES:
        _PAGES[rel] = gen_reference.expand((DOCS / rel).read_text(encoding="utf-8"))
    return _PAGES[rel]


VERIFIER = '''
def parity(completion, sample):
    """1 for completions whose characters sum to an odd number: mixed rewards in most groups."""
    return float(sum(map(ord, completion)) % 2)
'''


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The run directory of a 2-step tiny run (1 warm-start step, a checkpoint each step) with a
    reward that gives mixed groups (so the update and its actor/* statistics run) and tor token
    weighting (tokens/* keys, token_roles/)."""
    from mmrlvr.cli import main

    tmp = tmp_path_factory.mktemp("docs-run")
    (tmp / "parity.py").write_text(VERIFIER)
    config = tmp / "run.yaml"
    config.write_text(json.dumps({
        "output_dir": str(tmp / "run"), "task": {"name": "counting", "train_size": 8, "eval_size": 4},
        "warm_start": {"steps": 1, "batch_size": 2},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
        "rewards": [{"verifier": f"{tmp / 'parity.py'}:parity", "weight": 1.0}, {"verifier": "count", "weight": 0.5}],
        "token_weighting": {"method": "tor"}, "algo": {"kl_coef": 0.01},
        "train": {"steps": 2, "save_every": 1, "log_every": 1}, "verifier_workers": 0,
    }))
    assert main(["train", str(config)]) == 0
    return tmp / "run"
