"""The row loader: every real sample row, Parquet with embedded bytes, formats, bad rows."""

import io
import json
import logging

import datasets
import numpy as np
import pytest
from PIL import Image

from mmrlvr.data import media
from mmrlvr.data.collate import encode_prompts
from mmrlvr.data.io import DataError, open_dataset
from mmrlvr.data.media import RowRef, load_image
from mmrlvr.tasks import load_task


def _png(color, size=(28, 28)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _both(task, **args):
    train = load_task(task, "train", 10_000, 0, **args)
    held = load_task(task, "eval", 10_000, 0, **args)
    return train, held


@pytest.mark.parametrize("task, folder, extra, n, verifiers", [
    # 27 multiple choice + 23 free form (data README)
    ("geometry", "geometry_mathv", {}, 50, {"choice": 27, "math": 23}),
    # chart statistics: 14 with options; 6 numeric answers ("13", "8", "1", "3", "2.5", "2.5")
    ("chart", "chart_mathv_statistics", {}, 20, {"choice": 14, "number": 6}),
    # 30 images, 34 boxes: 27 images with one raccoon (iou), 3 with several (boxes)
    ("grounding", "grounding_raccoon", {"image_root": "images"}, 30, {"iou": 27, "boxes": 3}),
])
def test_every_shared_row_loads_and_decodes(shared_data, task, folder, extra, n, verifiers):
    d = shared_data / folder
    args = {"data": str(d / "annotations.jsonl"), **{k: str(d / v) for k, v in extra.items()}}
    train, held = _both(task, **args)
    rows = sorted(s.meta["row"] for s in train + held)
    assert rows == list(range(n)) and not train.skipped and not held.skipped
    assert len(held) == max(1, round(0.1 * n))  # seeded 10% held-out slice, disjoint from train
    counts = {}
    for s in train + held:
        counts[s.verifier] = counts.get(s.verifier, 0) + 1
        assert all(isinstance(ref, str) for ref in s.images)  # references, not pixels
        n_slots = sum(c["type"] == "image" for m in s.messages for c in m["content"])
        assert n_slots == len(s.images) >= 1
        for ref in s.images:
            assert load_image(ref).size[0] > 0
    assert counts == verifiers


def test_mathv_rows_in_detail(shared_data):
    d = shared_data / "geometry_mathv"
    train, held = _both("geometry", data=str(d / "annotations.jsonl"))
    by_id = {s.id: s for s in train + held}
    s = by_id["annotations.jsonl:1041"]  # first row: options $52^\circ$..$56^\circ$, answer A
    assert s.reference == "A" and s.verifier == "choice" and len(s.meta["options"]) == 5
    text = " ".join(c.get("text", "") for c in s.messages[0]["content"])
    assert "(A) $52^{\\circ}$" in text and "<image1>" not in text
    assert s.images == (str(d / "images/1041.jpg"),)


def test_raccoon_boxes_are_original_pixels(shared_data):
    d = shared_data / "grounding_raccoon"
    train, held = _both("grounding", data=str(d / "annotations.jsonl"), image_root=str(d / "images"))
    by_row = {s.meta["row"]: s for s in train + held}
    # row 0: raccoon-1.jpg, 650x417, xmin 81 ymin 88 xmax 522 ymax 408 (strings in the source)
    assert by_row[0].reference == [81.0, 88.0, 522.0, 408.0]
    assert by_row[0].meta["image_size"] == (650, 417)
    several = [s for s in train + held if s.verifier == "boxes"]
    assert sorted(len(s.reference) for s in several) == [2, 2, 3]  # 34 boxes = 27 + 2 + 2 + 3


def _geo3k_parquet(path, rows):
    """Geometry3K as EasyR1/verl package it: `images` a list of image dicts, `problem`, `answer`."""
    feats = datasets.Features({"images": datasets.List(datasets.Image()), "problem": datasets.Value("string"),
                               "answer": datasets.Value("string")})
    datasets.Dataset.from_list(rows, features=feats).to_parquet(str(path))
    return str(path)


def test_parquet_with_embedded_bytes_multi_image_and_bad_rows(tmp_path, caplog):
    red, blue = _png((255, 0, 0)), _png((0, 0, 255))
    img = lambda b: {"bytes": b, "path": None}  # noqa: E731
    rows = [
        {"images": [img(red)], "problem": "<image>Find x.", "answer": "3"},
        {"images": [img(red), img(blue)], "problem": "Compare <image2> with <image1>.", "answer": "2"},
        {"images": [img(b"")], "problem": "<image>Empty bytes.", "answer": "1"},           # bad: row 2
        {"images": [img(red)], "problem": "<image>No answer.", "answer": None},           # bad: row 3
        {"images": [img(red)], "problem": "<image1> and <image3>?", "answer": "4"},       # fine: composite
        {"images": [img(red), img(blue)], "problem": "<image3> is missing", "answer": "5"},  # bad: row 5
        {"images": [img(blue), img(red)], "problem": "Which is larger?", "answer": "6"},  # images first
    ]
    path = _geo3k_parquet(tmp_path / "geo3k.parquet", rows)
    args = dict(data=path, max_bad_frac=0.5, holdout_frac=0.0, cache_dir=str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        train = load_task("geometry", "train", 100, 0, **args)
    assert [b["row"] for b in train.skipped] == [2, 3, 5]
    reasons = [b["reason"] for b in train.skipped]
    assert "empty bytes" in reasons[0] and "answer is missing" in reasons[1] and "<image3>" in reasons[2]
    for row in (2, 3, 5):  # each bad row reported once, with the file and its 0-based index
        assert sum(f"row {row} skipped" in r.getMessage() and path in r.getMessage() for r in caplog.records) == 1
    by_row = {s.meta["row"]: s for s in train}
    assert sorted(by_row) == [0, 1, 4, 6]
    assert all(isinstance(ref, RowRef) for s in train for ref in s.images)
    colors = lambda s: [tuple(np.asarray(load_image(r))[0, 0]) for r in s.images]  # noqa: E731
    # row 1: "<image2> with <image1>" -> slots in that order: blue then red
    assert colors(by_row[1]) == [(0, 0, 255), (255, 0, 0)]
    kinds = [c["type"] for c in by_row[1].messages[0]["content"]]
    assert kinds == ["text", "image", "text", "image", "text", "text"]
    # row 6: no placeholder -> both images first, in row order
    assert [c["type"] for c in by_row[6].messages[0]["content"]][:3] == ["image", "image", "text"]
    assert colors(by_row[6]) == [(0, 0, 255), (255, 0, 0)]
    assert by_row[0].verifier == "math" and by_row[0].reference == "3"


def test_too_many_bad_rows_stop_with_file_count_and_rows(tmp_path):
    rows = [{"images": [{"bytes": _png((1, 2, 3)), "path": None}], "problem": "<image>q", "answer": "1"}] * 8
    rows += [{"images": [], "problem": "<image>q", "answer": "1"}] * 2  # rows 8, 9: no image
    path = _geo3k_parquet(tmp_path / "d.parquet", rows)
    with pytest.raises(DataError) as err:
        load_task("geometry", "train", 100, 0, data=path, max_bad_frac=0.1, cache_dir=str(tmp_path / "c"))
    msg = str(err.value)  # 2 of 10 bad > 0.1 * 10
    assert path in msg and "2 of 10 rows" in msg and "row 8:" in msg and "row 9:" in msg
    ok = load_task("geometry", "train", 100, 0, data=path, max_bad_frac=0.2, holdout_frac=0.2, cache_dir=str(tmp_path / "c"))
    # seed 0 holds out rows 7 and 8 (row 8 bad): 7 train + 1 eval = the 8 good rows
    assert len(ok) + len(load_task("geometry", "eval", 100, 0, data=path, max_bad_frac=0.2, holdout_frac=0.2,
                                   cache_dir=str(tmp_path / "c"))) == 8
    with pytest.raises(DataError, match=r"d.parquet: this split has no usable rows \(1 selected, 1 of them bad\)"):
        load_task("geometry", "eval", 100, 0, data=path, max_bad_frac=0.2, cache_dir=str(tmp_path / "c"))  # only row 8


def test_every_format_gives_the_same_samples(tmp_path):
    for i, c in enumerate([(255, 0, 0), (0, 255, 0), (0, 0, 255)]):
        Image.new("RGB", (28, 28), c).save(tmp_path / f"{i}.png")
    rows = [{"pid": i, "query": f"q{i} <image1>", "label": str(10 * i), "img": f"{i}.png"} for i in range(3)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d.json").write_text(json.dumps(rows))
    (tmp_path / "d.csv").write_text("pid,query,label,img\n" + "".join(f"{r['pid']},{r['query']},{r['label']},{r['img']}\n" for r in rows))
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    args = dict(columns={"image": "img", "id": "pid"}, image_root=str(tmp_path), holdout_frac=0.0,
                cache_dir=str(tmp_path / "cache"))
    seen = []
    for name in ("d.jsonl", "d.json", "d.csv", "d.parquet", "saved"):
        got = load_task("chart", "train", 10, 0, data=str(tmp_path / name), **args)
        seen.append([(s.id.split(":")[1], s.reference, s.verifier, s.images) for s in got])
    assert all(x == seen[0] for x in seen)
    assert seen[0][1] == ("1", "10", "number", (str(tmp_path / "1.png"),))


def test_missing_column_and_file_are_clear(tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"q": "x", "answer": "1"}) + "\n")
    with pytest.raises(DataError, match=r"no column for 'question'.*columns: q, answer"):
        load_task("geometry", "train", 1, 0, data=str(tmp_path / "d.jsonl"), cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataError, match="nope.parquet: file not found"):
        open_dataset(str(tmp_path / "nope.parquet"))
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(DataError, match="bad.jsonl: line 1: not valid JSON"):
        open_dataset(str(tmp_path / "bad.jsonl"), cache_dir=str(tmp_path / "c"))


def test_refcoco_style_xywh_boxes(tmp_path):
    Image.new("RGB", (200, 100)).save(tmp_path / "a.jpg")
    rows = [{"image": "a.jpg", "question": "the dog", "answer": [10, 20, 30, 40]},
            {"image": "a.jpg", "question": "the cat", "answer": "[1, 2, 3]"}]  # bad: 3 numbers
    path = tmp_path / "ref.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = load_task("grounding", "train", 10, 0, data=str(path), box_format="xywh", holdout_frac=0.0,
                    max_bad_frac=0.5, cache_dir=str(tmp_path / "c"))
    assert got[0].reference == [10.0, 20.0, 40.0, 60.0]  # x, y, w, h -> x1, y1, x+w, y+h
    assert got.skipped[0]["row"] == 1 and got.skipped[0]["reason"].startswith("box [1, 2, 3] is not four finite numbers; accepted forms:")


def test_samples_hold_no_decoded_image_until_their_batch_is_encoded(tmp_path, monkeypatch, tiny):
    _, processor = tiny
    rows = [{"images": [{"bytes": _png((i, 0, 0), (56, 56)), "path": None}], "problem": "<image>q", "answer": str(i)}
            for i in range(6)]
    path = _geo3k_parquet(tmp_path / "d.parquet", rows)
    calls = []
    real = media.Image.open
    monkeypatch.setattr(media.Image, "open", lambda *a, **k: calls.append(1) or real(*a, **k))
    samples = load_task("geometry", "train", 100, 0, data=path, holdout_frac=0.0, cache_dir=str(tmp_path / "c"))
    assert calls == [] and len(samples) == 6
    for s in samples:  # a reference into the memory-mapped table: no pixels, no bytes
        assert isinstance(s.images[0], RowRef) and not isinstance(s.images[0], (bytes, Image.Image))
    enc = encode_prompts(processor, samples[:2])
    assert len(calls) == 2 and enc["image_grid_thw"].shape[0] == 2


def test_two_candidate_columns_present_take_the_first_candidate():
    from mmrlvr.data.io import resolve_columns

    # both candidates exist; the dataset lists "solution" first: the mapping's order decides
    names = ["image", "solution", "question", "answer"]
    got = resolve_columns(names, {"answer": ["answer", "solution"], "question": "question"}, "rows.jsonl", ["answer"])
    assert got == {"answer": "answer", "question": "question"}
    got = resolve_columns(names, {"answer": ["solution", "answer"]}, "rows.jsonl", ["answer"])
    assert got == {"answer": "solution"}
