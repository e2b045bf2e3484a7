"""One bad-row rule: rows bad at load and rows whose media fail to decode count together against
task.max_bad_frac, in evaluation and in training, and the eval report lists each with its reason.

The file: 8 Parquet rows (real Pillow PNGs, written with pyarrow through `datasets`), row 2 an
image whose bytes are a PNG signature and then garbage (it passes the loader, which does not
decode, and fails at decode), row 5 without an answer (bad at load). Unset, the limit is
max(1%, one row) of 8 rows = 1 row: 2 bad rows stop the run.
"""

from __future__ import annotations

import io
from pathlib import Path

import datasets
import pytest
import yaml
from PIL import Image

from mmrlvr.config import load_config
from mmrlvr.data.bad_rows import BadRows
from mmrlvr.data.feed import BadMediaError, MediaStream
from mmrlvr.data.io import DataError
from mmrlvr.data.sources import SeededStream
from mmrlvr.tasks import load_task

BROKEN = b"\x89PNG\r\n\x1a\n" + b"garbage" * 4


def _png(color) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (28, 28), color).save(buf, format="PNG")
    return buf.getvalue()


def _write(path: Path, bad: bool) -> str:
    rows = [{"images": [{"bytes": BROKEN if bad and i == 2 else _png((30 * i, 0, 0)), "path": None}],
             "problem": f"<image>How many? ({i})", "answer": None if bad and i == 5 else str(i)} for i in range(8)]
    feats = datasets.Features({"images": datasets.List(datasets.Image()), "problem": datasets.Value("string"),
                               "answer": datasets.Value("string")})
    datasets.Dataset.from_list(rows, features=feats).to_parquet(str(path))
    return str(path)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory) -> str:
    return _write(tmp_path_factory.mktemp("bad") / "geo.parquet", bad=True)


def _cfg(parquet: str, tmp_path, *more: str, eval_data: str | None = None):
    """The tiny model on the file with the geometry task (question, answer, image); evaluated on
    the same file unless `eval_data` names another."""
    args = {"data": parquet, "eval_data": eval_data or parquet, "cache_dir": str(tmp_path / "cache")}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": "tiny"}, "output_dir": str(tmp_path / "run"), "threads": 1,
                                    "task": {"name": "geometry", "eval_size": 8, "args": args},
                                    "rollout": {"max_new_tokens": 4}, "eval": {"batch_size": 8}}))
    return load_config(str(path), list(more))


def test_eval_stops_at_two_bad_rows_of_eight_under_the_default(parquet, tmp_path):
    from mmrlvr.recipe.eval_cli import run_eval

    with pytest.raises(DataError) as err:
        run_eval(_cfg(parquet, tmp_path), "tiny")
    msg = str(err.value)
    assert msg.startswith(f"{parquet}: 2 of 8 rows are bad (1 at load, 1 with media that fail to decode; "
                          "more than task.max_bad_frac=0.125); first: row 5: answer is missing")
    assert "; row 2: MediaError: " in msg and "cannot decode image" in msg


@pytest.mark.parametrize("setting", ["task.max_bad_frac=0.25", "task.max_bad_media_frac=0.25",
                                     "task.args.max_bad_frac=0.25"])
def test_eval_under_a_wider_limit_skips_and_lists_both(parquet, tmp_path, capsys, setting):
    """The same 6 rows are evaluated whichever name sets the limit; each old name says it is deprecated."""
    from mmrlvr.recipe.eval_cli import format_table, run_eval

    report = run_eval(_cfg(parquet, tmp_path, setting), "tiny")
    assert report["n"] == 6
    assert [b["row"] for b in report["skipped"]] == [5, 2]  # at load, then at decode
    assert "answer is missing" in report["skipped"][0]["reason"]
    assert report["skipped"][1]["reason"].startswith("MediaError: ") and "cannot decode image" in report["skipped"][1]["reason"]
    table = format_table(report)
    assert table.split("skipped rows")[1].split("\n")[0].strip() == "2"
    assert "  row 5" in table and "  row 2" in table and "cannot decode image" in table
    err = capsys.readouterr().err
    old = setting.split("=")[0]
    if old == "task.max_bad_frac":
        assert "deprecated" not in err
    else:
        assert f"mmrlvr: warning: {old} is deprecated: use task.max_bad_frac" in err


def test_training_counts_the_load_bad_row_with_the_decode_failure(parquet, tmp_path):
    """The training stream starts from the loader's count (`BadRows.of(train_set)`, as the loop
    builds it): the one row bad at load plus the one undecodable image are 2 of 8, over the
    default; with task.max_bad_frac=0.25 the image is dropped and training goes on."""
    args = dict(data=parquet, holdout_frac=0.0, cache_dir=str(tmp_path / "c"))
    train_set = load_task("geometry", "train", 8, 0, **args)
    assert len(train_set) == 7 and (train_set.rows, len(train_set.bad)) == (8, 1)
    stream = MediaStream(SeededStream(train_set, seed=0), prefetch=False, bad_rows=BadRows.of(train_set))
    with pytest.raises(BadMediaError, match=r"geo.parquet: 2 of 8 rows are bad \(1 at load, 1 with media that fail "
                                            r"to decode; more than task.max_bad_frac=0.125\); first: row 5: answer"):
        stream.take(7)
    wide = load_task("geometry", "train", 8, 0, max_bad_frac=0.25, **args)
    stream = MediaStream(SeededStream(wide, seed=0), prefetch=False, bad_rows=BadRows.of(wide))
    assert len(stream.take(7)) == 6 and stream.pop_bad() == 1


def test_old_and_new_names_that_disagree_are_one_line(parquet, tmp_path):
    from mmrlvr.config import ConfigError
    from mmrlvr.checks.validate import validate_config

    with pytest.raises(ConfigError, match=r"task.max_bad_frac=0.25, task.max_bad_media_frac=0.5 disagree: they are "
                                          r"one limit now; set only task.max_bad_frac"):
        validate_config(_cfg(parquet, tmp_path, "task.max_bad_frac=0.25", "task.max_bad_media_frac=0.5"))


def test_train_obeys_the_rule_in_its_eval_and_its_stream(parquet, tmp_path):
    """Through `train()`: under the default the held-out evaluation before RL stops at the 2 of 8;
    evaluated on a clean file, the training stream stops at the same 2 of 8 when it draws the
    image; with task.max_bad_frac=0.25 one step draws all 7 loaded rows, drops the undecodable one
    (data/bad_media 1) and trains on 6."""
    import json

    from mmrlvr.recipe.loop import train

    small = ["train.steps=1", "warm_start.steps=0", "rollout.prompts_per_step=7", "rollout.group_size=2",
             "train.save_every=0", "train.log_every=1"]
    with pytest.raises(DataError, match=r"geo.parquet: 2 of 8 rows are bad \(1 at load, 1 with media .*; first: "
                                        r"row 5: answer is missing; row 2: MediaError: "):
        train(_cfg(parquet, tmp_path / "a", *small))  # the eval before RL
    clean = _write(tmp_path / "clean.parquet", bad=False)
    with pytest.raises(BadMediaError, match=r"geo.parquet: 2 of 8 rows are bad \(1 at load, 1 with media .*; first: "
                                            r"row 5: answer is missing; geo.parquet:2: "):
        train(_cfg(parquet, tmp_path / "b", *small, eval_data=clean))  # the first step's prompts
    train(_cfg(parquet, tmp_path / "c", *small, "task.max_bad_frac=0.25"))
    rows = [json.loads(x) for x in (tmp_path / "c" / "run" / "metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if "data/bad_media" in r]
    assert len(step) == 1 and step[0]["data/bad_media"] == 1.0
