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


SHARED_DATA_HELP = (
    "small samples of public datasets (MATH-V geometry and statistics questions, raccoon boxes, "
    "mmaction2 / Ask-Anything clips, NExT-QA annotations; sources and licences in its README.md). "
    "It is not in the repository: the project keeps it in shared/data next to the checkouts (CI "
    "copies it to ../shared/data beside the checkout); point MMRLVR_TEST_DATA at a copy to run these tests"
)


def shared_data_path():
    from pathlib import Path

    env = os.environ.get("MMRLVR_TEST_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data():
    """../shared/data beside the checkout (or $MMRLVR_TEST_DATA): real public samples."""
    path = shared_data_path()
    if not path.is_dir():
        pytest.skip(f"no test data at {path}: needs {SHARED_DATA_HELP}")
    return path


@pytest.fixture
def cached_qwen3b(tmp_path, monkeypatch):
    """Qwen/Qwen2.5-VL-3B-Instruct's config.json in a Hugging Face cache of the test's own (what a
    download leaves: refs/main naming a snapshot), so a run's check that the model can be had
    passes offline; the plan sizes it from the same shipped config. Weights are never read."""
    import shutil
    from pathlib import Path

    import huggingface_hub.constants as constants

    repo = tmp_path / "hub" / "models--Qwen--Qwen2.5-VL-3B-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    shipped = Path(__file__).resolve().parents[1] / "mmrlvr" / "models" / "configs" / "Qwen2.5-VL-3B-Instruct.json"
    shutil.copy(shipped, snap / "config.json")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return "Qwen/Qwen2.5-VL-3B-Instruct"
