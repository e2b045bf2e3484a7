import os

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """The embedded tiny model, built once per test session in a temporary cache."""
    from mmrlvr.models.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("cache") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    from mmrlvr.models.load import load_policy

    model, processor = load_policy(str(tiny_dir))
    return model, processor


@pytest.fixture
def fresh_tiny(tiny_dir):
    from mmrlvr.models.load import load_policy

    return load_policy(str(tiny_dir))


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    os.environ["MMRLVR_CACHE"] = str(tmp_path_factory.mktemp("mmrlvr-cache"))
    yield


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data beside the checkout (CI copies it there)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not path.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    return path
