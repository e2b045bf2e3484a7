"""One bad-row policy and one set of argument names across image and video tasks."""

import json
import logging

import pytest
from PIL import Image

from mmrlvr.data.io import DataError
from mmrlvr.tasks import load_task
from mmrlvr.tasks._policy import bad_frac


def test_unset_limit_allows_one_bad_row_in_a_small_file_and_set_limits_are_kept():
    assert bad_frac(None, 30) == pytest.approx(1 / 30)  # 1 bad row of 30 is allowed: 1 > 30 * (1/30) is false
    assert bad_frac(None, 1000) == 0.01  # large files: the 1% default
    assert bad_frac(0.0, 30) == 0.0 and bad_frac(0.2, 30) == 0.2  # set: as given


def _geometry_rows(tmp_path, n, bad):
    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")
    rows = [{"image": "a.png" if i >= bad else "missing.png", "question": f"q{i}", "answer": str(i)} for i in range(n)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_image_task_with_one_bad_row_in_thirty_loads_and_two_stop(tmp_path):
    path = _geometry_rows(tmp_path, 30, bad=1)
    got = load_task("geometry", "train", 100, 0, data=path, holdout_frac=0.0, cache_dir=str(tmp_path / "c"))
    assert len(got) == 29 and got.skipped[0]["row"] == 0
    with pytest.raises(DataError, match=r"d.jsonl: 1 of 30 rows are bad \(more than max_bad_frac=0\)"):
        load_task("geometry", "train", 100, 0, data=path, holdout_frac=0.0, max_bad_frac=0.0, cache_dir=str(tmp_path / "c"))
    path = _geometry_rows(tmp_path, 30, bad=2)
    with pytest.raises(DataError, match=r"2 of 30 rows are bad"):
        load_task("geometry", "train", 100, 0, data=path, holdout_frac=0.0, cache_dir=str(tmp_path / "c2"))


def test_video_task_skips_a_bad_row_like_image_tasks_and_old_names_still_work(tmp_path, caplog):
    from tests.tasks.test_video_tasks import _write_clip

    _write_clip(tmp_path / "a.mp4", frames=30)  # 3 s: every segment below ends within the clip
    rows = [{"video": "a.mp4", "query": f"event {i}", "timestamp": [0, 1 + i % 3]} for i in range(29)]
    rows.insert(5, {"video": "gone.mp4", "query": "lost", "timestamp": [0, 1]})
    ann = tmp_path / "g.jsonl"
    ann.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="mmrlvr.data"):
        got = load_task("temporal_grounding", "train", 100, 0, data=str(ann), holdout_frac=0.0)
    assert len(got) == 29 and got.skipped == [{"row": 5, "reason": f"video {tmp_path / 'gone.mp4'} not found"}]
    assert any("g.jsonl: row 5 skipped: video" in r.getMessage() for r in caplog.records)
    with pytest.warns(DeprecationWarning, match="task.args.annotations is deprecated; use task.args.data"):
        old = load_task("temporal_grounding", "train", 100, 0, annotations=str(ann), eval_frac=0.0)
    assert [s.reference for s in old] == [s.reference for s in got]
    with pytest.raises(ValueError, match="task.args.eval_frac and task.args.holdout_frac are the same setting"):
        load_task("temporal_grounding", "train", 100, 0, data=str(ann), eval_frac=0.0, holdout_frac=0.1)


def test_the_bad_row_fraction_prints_rounded():
    from mmrlvr.data.io import BadRow, Row, build_samples

    rows = [Row(i, {}, []) for i in range(43)]

    def make(row):
        if row.index in (3, 7):
            raise BadRow("answer is missing")
        return row.index

    with pytest.raises(DataError, match=r"^d.jsonl: 2 of 43 rows are bad \(more than max_bad_frac=0\.0233\); first: row 3"):
        build_samples("d.jsonl", rows, make, 1 / 43)
