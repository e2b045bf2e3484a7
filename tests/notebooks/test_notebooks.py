"""Every notebook in notebooks/ runs top to bottom on the tiny model, and writes its figures.

One kernel per notebook (a fresh process, as a user would run it), one torch thread, outputs to a
temporary folder; a cell that raises fails the test with that cell's traceback.
"""

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"quickstart", "attention_and_grounding", "token_roles", "custom_verifier", "video_temporal"}


def test_all_notebooks_are_present_and_committed_without_outputs():
    assert {p.stem for p in NOTEBOOKS} >= EXPECTED
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert cell.get("outputs") == [] and cell.get("execution_count") is None, f"{path.name}: clear outputs"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    out = tmp_path / "out"
    monkeypatch.setenv("MMRLVR_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("MMRLVR_REAL_MODEL", raising=False)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    pngs = sorted(out.rglob("*.png"))
    assert pngs, f"{path.name} wrote no figure under $MMRLVR_NOTEBOOK_OUT"
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert max(p.stat().st_size for p in pngs) > 20_000, "no figure-sized PNG"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_header_reads_the_test_data_and_checks_imports_first(path, tmp_path, monkeypatch):
    """The first code cell finds the real data where the tests do ($MMRLVR_TEST_DATA) and names a
    missing plotting library at once, not after minutes of training."""
    import importlib.util

    header = "".join(next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")["source"])
    assert header.index("find_spec") < header.index("import torch")
    monkeypatch.setenv("MMRLVR_TEST_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("MMRLVR_NOTEBOOK_OUT", str(tmp_path / "out"))
    namespace: dict = {}
    exec(compile(header, path.name, "exec"), namespace)  # noqa: S102 - our own notebook's first cell
    assert namespace["DATA"] == tmp_path / "data"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(ImportError, match="this notebook needs matplotlib"):
        exec(compile(header, path.name, "exec"), {})  # noqa: S102
