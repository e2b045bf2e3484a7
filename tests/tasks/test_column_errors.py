"""Every column kind a task maps: a column that is not in the file is named once, with the file's
columns and the key to set, instead of every row failing; video tasks take `columns` as image
tasks do; hints name the setting that fixes a missing file."""

import json

import pytest
from PIL import Image

from mmrlvr.config import load_config
from mmrlvr.data.io import DataError
from mmrlvr.tasks import load_task
from mmrlvr.checks.validate import config_errors
from tests.tasks.test_video_tasks import _write_clip


def _rows(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _image_rows(tmp_path, **extra):
    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")
    return _rows(tmp_path, [{"picture": "a.png", "question": f"q{i}", "answer": str(i), **extra} for i in range(3)])


def test_a_wrong_image_column_is_named_with_the_files_columns(tmp_path):
    path = _image_rows(tmp_path)
    with pytest.raises(DataError) as err:
        load_task("geometry", "train", 10, 0, data=path, columns={"image": "img"}, cache_dir=str(tmp_path / "c"))
    assert str(err.value) == (f"{path}: no column for 'image' (looked for 'img'); columns: picture, question, answer; "
                              "set task.args.columns.image")
    # unmapped, the default candidates are named (it used to be "the row has no image" for every row)
    with pytest.raises(DataError, match=r"no column for 'image' \(looked for 'image', 'images', 'imgname', 'image_path'\); "
                                        r"columns: picture, question, answer; set task.args.columns.image"):
        load_task("chart", "train", 10, 0, data=path, cache_dir=str(tmp_path / "c"))
    got = load_task("geometry", "train", 10, 0, data=path, columns={"image": "picture"}, holdout_frac=0.0,
                    cache_dir=str(tmp_path / "c"))
    assert [s.reference for s in got] == ["0", "1", "2"]


def test_a_wrong_answer_column_and_a_wrong_box_column_are_named(tmp_path):
    path = _image_rows(tmp_path)
    with pytest.raises(DataError) as err:  # two wrong columns: both in one line
        load_task("chart", "train", 10, 0, data=path, columns={"image": "picture", "answer": "label", "question": "q"},
                  cache_dir=str(tmp_path / "c"))
    assert str(err.value) == (f"{path}: no column for 'question' (looked for 'q'); no column for 'answer' (looked for "
                              "'label'); columns: picture, question, answer; set task.args.columns.question, "
                              "task.args.columns.answer")
    with pytest.raises(DataError, match=r"no column for 'answer' \(looked for 'bbox_xyxy'\); columns: picture, question, answer"):
        load_task("grounding", "train", 10, 0, data=path, columns={"image": "picture", "answer": "bbox_xyxy"},
                  cache_dir=str(tmp_path / "c"))
    boxless = _rows(tmp_path, [{"image": "a.png", "caption": "the dot", "region": [1, 1, 9, 9]}], "g.jsonl")
    with pytest.raises(DataError, match=r"g.jsonl: no column for 'answer' or 'objects' \(looked for 'answer', 'bbox', "
                                        r"'box', 'solution', 'objects'\); columns: image, caption, region; set task.args.columns.answer"):
        load_task("grounding", "train", 10, 0, data=boxless, cache_dir=str(tmp_path / "c"))


def test_a_relative_image_that_is_not_found_names_image_root(tmp_path):
    path = _rows(tmp_path, [{"image": "pics/a.png", "question": "q", "answer": "1"}] * 2)
    with pytest.raises(DataError, match=r"first: row 0: image file not found: .*pics/a.png \(relative paths start from "
                                        r"task.args.image_root, by default the data file's folder\)"):
        load_task("geometry", "train", 10, 0, data=path, cache_dir=str(tmp_path / "c"))


def _grounding_rows(tmp_path):
    _write_clip(tmp_path / "a.mp4", frames=40)  # 4 s
    return _rows(tmp_path, [{"clip": "a.mp4", "caption": "it gets bright", "span": [2.0, 3.5]},
                            {"clip": "a.mp4", "caption": "it starts", "span": [0, 1]}], "renamed.jsonl")


def test_temporal_grounding_reads_renamed_columns_and_names_a_wrong_one(tmp_path):
    path = _grounding_rows(tmp_path)
    cols = {"video": "clip", "query": "caption", "timestamp": "span"}
    got = load_task("temporal_grounding", "train", 10, 0, data=path, holdout_frac=0.0, columns=cols)
    assert [s.reference for s in got] == [[2.0, 3.5], [0.0, 1.0]]
    assert got[0].videos[0].path == str(tmp_path / "a.mp4") and "it gets bright" in got[0].messages[0]["content"][1]["text"]
    with pytest.raises(DataError) as err:  # the default `timestamp` column is not in the file
        load_task("temporal_grounding", "train", 10, 0, data=path, holdout_frac=0.0, columns={"video": "clip", "query": "caption"})
    assert str(err.value) == (f"{path}: no column for 'timestamp' (looked for 'timestamp'); columns: clip, caption, span; "
                              "set task.args.columns.timestamp")
    with pytest.raises(DataError, match=r"no column for 'video' \(looked for 'video_path'\); columns: clip, caption, span; "
                                        r"set task.args.columns.video"):
        load_task("temporal_grounding", "train", 10, 0, data=path, columns={**cols, "video": "video_path"})


def test_nextqa_reads_a_renamed_video_column_and_hints_skip_missing(tmp_path):
    (tmp_path / "v").mkdir()
    _write_clip(tmp_path / "v" / "111.mp4")
    row = {"clip_id": "111", "question": "what happens", "label": "2", **{f"a{i}": f"opt{i}" for i in range(5)}}
    path = _rows(tmp_path, [row, {**row, "clip_id": "222"}])
    args = dict(data=path, video_dir=str(tmp_path / "v"), holdout_frac=0.0, max_bad_frac=0.5)
    got = load_task("nextqa", "train", 10, 0, columns={"video": "clip_id", "answer": "label"}, **args)
    assert [(s.reference, s.videos[0].path) for s in got] == [("C", str(tmp_path / "v" / "111.mp4"))]
    assert got.skipped == [{"row": 1, "reason": f"video '222' not found under {tmp_path / 'v'} (task.args.skip_missing: "
                                                "true leaves out rows whose video is absent)"}]
    with pytest.raises(DataError, match=r"no column for 'video' \(looked for 'video'\); no column for 'answer' \(looked "
                                        r"for 'answer'\); columns: clip_id, question, label, a0, a1, a2, a3, a4"):
        load_task("nextqa", "train", 10, 0, **args)


def test_video_tasks_accept_columns_in_the_config_and_name_a_typo():
    cfg = load_config("configs/video_qwen2.5vl_3b.yaml", ["task.args.columns.video=clip_id"])
    assert [e for e in config_errors(cfg) if "columns" in e] == []  # it used to say "reads no data columns"
    cfg = load_config("configs/video_qwen2.5vl_3b.yaml", ["task.args.columns.vidoe=clip_id"])
    assert "task.args.columns.vidoe='clip_id': not a column key of task 'nextqa'; known: video, question, answer, " \
           "a0, a1, a2, a3, a4, type, id, prompt" in config_errors(cfg)


def test_a_video_task_line_that_is_not_an_object_is_named(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"video": "a.mp4", "query": "q", "timestamp": [0, 1]}) + "\n[0, 1]\n")
    with pytest.raises(DataError, match=rf"task temporal_grounding \(train split\): {path}:2: not a JSON object$"):
        load_task("temporal_grounding", "train", 10, 0, data=str(path))


def test_every_missing_column_of_a_grounding_file_shares_one_line(tmp_path):
    path = _rows(tmp_path, [{"picture": "a.png", "caption": "the dot", "region": [1, 1, 9, 9]}], "g2.jsonl")
    with pytest.raises(DataError) as err:
        load_task("grounding", "train", 10, 0, data=path, cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"{path}: no column for 'image' (looked for ")
    assert str(err.value).endswith("); no column for 'answer' or 'objects' (looked for 'answer', 'bbox', 'box', 'solution', "
                                   "'objects'); columns: picture, caption, region; set task.args.columns.image, "
                                   "task.args.columns.answer")
