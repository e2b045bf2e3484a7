"""Media are never dropped silently: a column of image or video paths (or image data) that no
column key maps is one line naming it and the mapping that reads it, before the model loads; a
prompt that shows an image on a row without one is refused, not trained on as text."""

import json

import pytest
from PIL import Image

from mmrlvr.data.io import DataError
from mmrlvr.tasks import load_task


def _rows(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def pictures(tmp_path):
    for i in range(3):
        Image.new("RGB", (56, 56), "white").save(tmp_path / f"p{i}.png")
    return tmp_path


def test_an_unmapped_image_path_column_is_named_with_the_key_that_reads_it(pictures):
    path = _rows(pictures, [{"photo": f"p{i}.png", "question": "How many?", "answer": str(i)} for i in range(3)])
    with pytest.raises(DataError) as err:
        load_task("generic", "train", 10, 0, data=path, verifier="exact", cache_dir=str(pictures / "c"))
    assert str(err.value) == (f"{path}: column 'photo' holds images ('p0.png' in its first rows) that no column key reads, "
                              "so every sample would train without them; set task.args.columns.image: photo")
    got = load_task("generic", "train", 10, 0, data=path, verifier="exact", holdout_frac=0.0, columns={"image": "photo"},
                    cache_dir=str(pictures / "c"))
    assert [s.images for s in got] == [(str(pictures / f"p{i}.png"),) for i in range(3)]


def test_a_second_picture_column_and_a_video_column_in_an_image_task_are_named(pictures):
    path = _rows(pictures, [{"image": f"p{i}.png", "thumb": [f"p{i}.png"], "question": "q", "answer": "1"} for i in range(3)])
    with pytest.raises(DataError) as err:
        load_task("geometry", "train", 10, 0, data=path, cache_dir=str(pictures / "c"))
    assert str(err.value) == (f"{path}: column 'thumb' holds images (['p0.png'] in its first rows) that no column key "
                              "reads, so they would be dropped; the task's image comes from column 'image': drop 'thumb' "
                              "from the data, or set task.args.columns.image: thumb to read it instead")
    path = _rows(pictures, [{"image": f"p{i}.png", "clip": "a.MP4", "question": "q", "answer": "1"} for i in range(3)], "v.jsonl")
    with pytest.raises(DataError, match=r"column 'clip' holds videos \('a.MP4' in its first rows\) that no column key "
                                        r"reads; this task reads no videos: drop the column, or use a task that does"):
        load_task("geometry", "train", 10, 0, data=path, cache_dir=str(pictures / "c"))


def test_text_that_only_mentions_a_file_name_now_and_then_stays_an_extra_column(pictures):
    rows = [{"image": f"p{i}.png", "note": "see p1.png" if i == 0 else "plain text", "question": "q", "answer": "1"}
            for i in range(3)]
    got = load_task("geometry", "train", 10, 0, data=_rows(pictures, rows), holdout_frac=0.0, cache_dir=str(pictures / "c"))
    assert [s.meta["columns"]["note"] for s in got] == ["see p1.png", "plain text", "plain text"]


def test_a_prompt_that_shows_an_image_on_rows_without_one_is_refused(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("<image> {{ question }} Answer inside <answer></answer>.")
    path = _rows(tmp_path, [{"question": "q1", "answer": "1"}, {"question": "q2", "answer": "2"}])
    with pytest.raises(DataError) as err:
        load_task("generic", "train", 10, 0, data=path, verifier="exact", prompt_template=str(template),
                  cache_dir=str(tmp_path / "c"))
    assert str(err.value) == (f"{path}: all 2 rows are bad; first: row 0: question names <image> but the row has 0 "
                              "image(s); row 1: question names <image> but the row has 0 image(s)")
