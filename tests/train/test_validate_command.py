"""`mmrlvr validate CONFIG [overrides]`: everything a run checks before its model loads, and
nothing more: exit 0 when `mmrlvr train` would start, 2 with one `mmrlvr: error:` line otherwise.

The data: 10 rows of the generic task over real raccoon photos (the shared sample), copied into a
temporary folder; the broken ones are a JPEG whose bytes stop after its first 200 (it loads as a
path and fails at decode). Under task.max_bad_frac=0.1 one bad row of 10 is allowed, two are not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmrlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]
PHOTOS = [f"raccoon-{i}.jpg" for i in (1, 10, 100, 101, 102, 103, 104, 105, 106, 107)]


@pytest.fixture
def rows(shared_data, tmp_path) -> Path:
    """10 rows, each a copied raccoon photo asked 'how many' (answer 1)."""
    images = tmp_path / "images"
    images.mkdir()
    for name in PHOTOS:
        shutil.copy(shared_data / "grounding_raccoon" / "images" / name, images / name)
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"photo": n, "question": "How many raccoons?", "raccoons": 1}) + "\n"
                            for n in PHOTOS))
    return data


def _config(rows: Path, tmp_path: Path, header: str = "", **more) -> Path:
    cfg = {"model": {"path": "tiny"}, "output_dir": str(tmp_path / "run"), "threads": 1,
           "task": {"name": "generic", "train_size": 8, "eval_size": 2, "max_bad_frac": 0.1,
                    "args": {"data": str(rows), "image_root": str(rows.parent / "images"),
                             "columns": {"image": "photo", "answer": "raccoons"}, "verifier": "number",
                             "holdout_frac": 0.2}},
           "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4}, **more}
    path = tmp_path / "run.yaml"
    path.write_text(header + yaml.safe_dump(cfg))
    return path


def _break(rows: Path, *names: str) -> None:
    for name in names:
        photo = rows.parent / "images" / name
        photo.write_bytes(photo.read_bytes()[:200])


def _errors(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_a_good_config_exits_0_in_a_real_process_and_writes_nothing(rows, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "mmrlvr.cli", "validate", str(_config(rows, tmp_path))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    # 10 rows, holdout_frac 0.2: 8 train, 2 held out
    assert proc.stdout.startswith("run.yaml: a run would start: 8 train and 2 held-out rows"), proc.stdout
    assert "memory not planned" in proc.stdout  # no '# Hardware:' header
    assert "mmrlvr: error" not in proc.stderr
    assert not (tmp_path / "run").exists()  # validation writes nothing, loads no model


def test_media_count_against_the_bad_row_rule(rows, tmp_path, capsys):
    _break(rows, "raccoon-100.jpg")  # one bad row of 10: within max_bad_frac=0.1
    assert main(["validate", str(_config(rows, tmp_path))]) == 0
    assert "(1 with media that fail to decode" in capsys.readouterr().out
    _break(rows, "raccoon-104.jpg")  # two: over the limit, named before any model loads
    assert main(["validate", str(_config(rows, tmp_path))]) == 2
    err = _errors(capsys)
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: ") and "raccoon-100.jpg" in err[0], err
    assert "task.max_bad_frac=0.1" in err[0]


def test_a_reward_plugin_that_raises_on_a_real_sample_is_named(rows, tmp_path, capsys):
    plugin = tmp_path / "reward.py"
    plugin.write_text("def fn(completion, sample):\n    return float(sample.meta['no_such_field'])\n")
    assert main(["validate", str(_config(rows, tmp_path)), f"rewards=[{{verifier: {plugin}:fn}}]"]) == 2
    err = _errors(capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"mmrlvr: error: rewards[0].verifier='{plugin}:fn': failed on sample ")
    assert "raised KeyError" in err[0] and "no_such_field" in err[0]
    good = tmp_path / "good_reward.py"  # imports and scores: a run would start
    good.write_text("def fn(completion, sample):\n    return 1.0\n")
    assert main(["validate", str(_config(rows, tmp_path)), f"rewards=[{{verifier: {good}:fn}}]"]) == 0


def test_settings_and_data_problems_are_the_runs_own_lines(rows, tmp_path, capsys):
    """The same lines `mmrlvr train` prints: an unregistered verifier (docs/how-to/your-data.md),
    a device that is not there, a missing data file."""
    assert main(["validate", str(_config(rows, tmp_path)), "task.args.verifier=nubmer"]) == 2
    err = _errors(capsys)
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: task.args.verifier='nubmer': a registered verifier; known:")
    assert main(["validate", str(_config(rows, tmp_path)), f"task.args.data={tmp_path / 'none.jsonl'}"]) == 2
    assert len(_errors(capsys)) == 1


def test_a_plan_that_does_not_fit_its_stated_hardware_is_refused(rows, tmp_path, capsys, cached_qwen3b):
    """The 3B model (sized from its shipped config, nothing downloaded) on the header's one 8 GB
    GPU: its bf16 weights (7.5 GB) with float32 masters (15 GB) alone are more; one 80 GB GPU holds it."""
    path = _config(rows, tmp_path, header="# Hardware: one 8 GB GPU\n",
                   model={"path": "Qwen/Qwen2.5-VL-3B-Instruct", "dtype": "bfloat16", "max_pixels": 50176},
                   train={"micro_batch_tokens": 4096}, warm_start={"steps": 0})
    assert main(["validate", str(path)]) == 2
    err = _errors(capsys)
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: memory: the plan needs "), err
    assert "more than the 1 x 8 GB GPU the config's header states" in err[0]
    path.write_text(path.read_text().replace("one 8 GB GPU", "one 80 GB GPU"))
    assert main(["validate", str(path)]) == 0
    assert "GB per GPU on 1 x 80 GB GPU: fits" in capsys.readouterr().out
