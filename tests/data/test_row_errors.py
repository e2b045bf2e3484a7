"""Every malformed row is one line naming file, row and field; a file that cannot be used stops
the load with one DataError line; nothing is silently split, merged or scored against NaN."""

import json
import logging

import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from mmrlvr.data.io import BadRow, DataError, build_samples, open_dataset
from mmrlvr.data.qa import option_list
from mmrlvr.tasks import load_task


def _geometry(tmp_path, rows, **args):
    Image.new("RGB", (28, 28)).save(tmp_path / "a.png")
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"image": "a.png", **r}) + "\n" for r in rows))
    return str(path), dict(data=str(path), cache_dir=str(tmp_path / "c"), holdout_frac=0.0, **args)


def test_malformed_cells_skip_their_row_only(tmp_path, caplog):
    good = {"question": "<image>x?", "answer": "A", "options": ["1", "2"]}
    rows = [good, {**good, "options": "ABCD"}, {**good, "options": 5}, {**good, "answer": float("nan")},
            {**good, "options": '["p", "q", "r"]', "answer": "q"}, good]
    path, args = _geometry(tmp_path, rows, max_bad_frac=0.5)
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("geometry", "train", 100, 0, **args)
    # rows 0, 4 and 5 are usable; row 4's JSON-list string is a list of 3 options, "q" is (B)
    assert [s.meta["row"] for s in got] == [0, 4, 5] and got[1].meta["options"] == ["p", "q", "r"]
    assert got[1].reference == "B"
    lines = [r.getMessage() for r in caplog.records]
    assert f"{path}: row 1 skipped: field 'options': expected a list, got the string 'ABCD'" in lines
    assert f"{path}: row 2 skipped: field 'options': expected a list, got int '5'" in lines
    assert f"{path}: row 3 skipped: answer is missing" in lines  # JSON's NaN arrives as null


def test_a_latin1_byte_in_a_cell_skips_that_row(tmp_path, caplog):
    Image.new("RGB", (28, 28)).save(tmp_path / "a.png")
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"image": "a.png", "question": f"<image>q{i}?", "answer": "1"}).encode() for i in range(4)]
    lines[2] = b'{"image": "a.png", "question": "<image>caf\xe9?", "answer": "1"}'
    path.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("geometry", "train", 10, 0, data=str(path), holdout_frac=0.0, max_bad_frac=0.5,
                        cache_dir=str(tmp_path / "c"))
    assert [s.meta["row"] for s in got] == [0, 1, 3]
    # the cell is '<image>caf\xe9?': 0xe9 is its 11th byte
    assert f"{path}: row 2 skipped: field 'question': not UTF-8 (byte 0xe9 at byte 11 of the cell)" in \
        [r.getMessage() for r in caplog.records]


def test_a_latin1_byte_inside_a_list_cell_skips_that_row_only(tmp_path, caplog):
    """A bad byte inside a nested value (the options list) is that row's problem, named with its field."""
    Image.new("RGB", (28, 28)).save(tmp_path / "a.png")
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"image": "a.png", "question": f"<image>q{i}?", "answer": "A", "options": ["1", "2"]}).encode()
             for i in range(5)]
    lines[3] = lines[3].replace(b'"2"', b'"caf\xe9"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("geometry", "train", 10, 0, data=str(path), holdout_frac=0.0, max_bad_frac=0.5,
                        cache_dir=str(tmp_path / "c"))
    assert [s.meta["row"] for s in got] == [0, 1, 2, 4] and got[0].meta["options"] == ["1", "2"]
    assert f"{path}: row 3 skipped: field 'options': not UTF-8 inside the nested value" in \
        [r.getMessage() for r in caplog.records]


def test_a_nan_answer_cell_is_a_bad_row():
    """CSV and Parquet hand a float NaN through (pandas reads "NaN" as one): str() would make it 'nan'."""
    from mmrlvr.data.io import Row
    from mmrlvr.data.qa import qa_sample

    with pytest.raises(BadRow, match="field 'answer' is nan, not a usable reference"):
        qa_sample(Row(3, {"question": "x?", "answer": float("nan")}, []), "f.csv", "answer", need_image=False)
    with pytest.raises(BadRow, match="field 'answer' is inf"):
        qa_sample(Row(3, {"question": "x?", "answer": float("inf")}, []), "f.csv", "answer", need_image=False)
    assert qa_sample(Row(3, {"question": "x?", "answer": 2.5}, []), "f.csv", "answer", need_image=False).reference == "2.5"


def test_an_unexpected_exception_in_a_row_function_skips_the_row():
    def make(row):
        return int(row)  # "abc" raises ValueError: a malformed cell, not a crash of the whole load

    got = build_samples("f.jsonl", [_Row(0, "1"), _Row(1, "abc"), _Row(2, "3")],
                        lambda r: make(r.value), max_bad_frac=0.5)
    assert list(got) == [1, 3]
    assert got.skipped == [{"row": 1, "reason": "malformed cell (ValueError: invalid literal for int() with base 10: 'abc')"}]


class _Row:
    def __init__(self, index, value):
        self.index, self.value = index, value


def test_unusable_files_and_settings_are_one_data_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(DataError, match=r"empty.jsonl: empty file \(no rows\)"):
        open_dataset(str(empty))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"question": "a"}\n{"quest\xe9ion": "b"}\n')  # in a key: the file cannot be read
    with pytest.raises(DataError, match=r"latin.jsonl: line 2: not UTF-8 \(byte 0xe9 at byte 8\)"):
        open_dataset(str(latin), cache_dir=str(tmp_path / "c"))
    rows = [_Row(0, "1"), _Row(1, "x")]
    with pytest.raises(DataError, match=r"max_bad_frac=nan: expected a fraction in \[0, 1\]"):
        build_samples("f", rows, lambda r: int(r.value), max_bad_frac=float("nan"))
    with pytest.raises(DataError, match=r"f: all 2 rows are bad; first: row 0: no"):  # max_bad_frac=1 allows all
        build_samples("f", rows, lambda r: (_ for _ in ()).throw(BadRow("no")), max_bad_frac=1.0)
    path, args = _geometry(tmp_path, [{"question": "<image>x?", "answer": "1"}] * 3)
    with pytest.raises(DataError, match=r"d.jsonl: this split has no usable rows \(0 selected, 0 of them bad\); holdout_frac=0"):
        load_task("geometry", "eval", 10, 0, **args)
    with pytest.raises(DataError, match=r"task.args.columns.image: expected a column name or a list of names, got '5'"):
        load_task("geometry", "train", 10, 0, **{**args, "columns": {"image": 5}})


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=12), st.integers(), st.floats(), st.lists(st.text(max_size=4), max_size=4),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_option_list_is_a_list_of_strings_or_a_bad_row(cell):
    try:
        out = option_list(cell)
    except BadRow as exc:
        assert str(exc).startswith("field 'options'")
        return
    assert isinstance(out, list) and all(isinstance(o, str) for o in out)
    if isinstance(cell, str) and cell.strip():  # only a JSON list written as a string is accepted
        assert json.loads(cell) == out or [str(x) for x in json.loads(cell)] == out


def test_train_and_eval_print_data_errors_as_one_line(tmp_path, capsys):
    from mmrlvr.cli import main

    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    assert main(["train", "/dev/null", "task.name=geometry", f"task.args.data={empty}", f"output_dir={tmp_path / 'r'}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"mmrlvr: error: {empty}: empty file (no rows)"]
    from tests.conftest import shared_data_path

    raccoon = shared_data_path() / "grounding_raccoon" / "annotations.jsonl"
    assert main(["eval", "/dev/null", "task.name=grounding", f"task.args.data={raccoon}", "task.args.box_format=bogus",
                 "--checkpoint", "tiny", "--out", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mmrlvr: error: task.args.box_format='bogus': one of xyxy, xywh")


def test_references_that_can_never_score_are_bad_rows(tmp_path, caplog):
    """A VOC box outside its image, and a temporal segment ending at Infinity."""
    from mmrlvr.data.io import DataError

    Image.new("RGB", (60, 40)).save(tmp_path / "a.png")
    obj = {"class": "dog", "xmin": 5, "ymin": 5, "xmax": 50, "ymax": 30, "width": 60, "height": 40}
    path = tmp_path / "voc.jsonl"
    path.write_text("".join(json.dumps({"image": "a.png", "objects": [o]}) + "\n"
                            for o in (obj, {**obj, "xmax": 90}, obj)))  # row 1: x2 = 90 > width 60
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("grounding", "train", 10, 0, data=str(path), holdout_frac=0.0, max_bad_frac=0.5,
                        cache_dir=str(tmp_path / "c"))
    assert [s.meta["row"] for s in got] == [0, 2]
    assert f"{path}: row 1 skipped: field 'objects': box [5.0, 5.0, 90.0, 30.0] lies outside the 60x40 image" in \
        [r.getMessage() for r in caplog.records]
    ann = tmp_path / "ground.jsonl"
    ann.write_text('{"video": "a.mp4", "query": "it ends", "timestamp": [0, Infinity]}\n')
    with pytest.raises(DataError, match=r"ground\.jsonl: all 1 rows are bad; first: row 0: timestamp must be finite"):
        load_task("temporal_grounding", "train", 10, 0, annotations=str(ann))


def test_an_unterminated_csv_quote_is_named_not_merged(tmp_path):
    from mmrlvr.data.io import unclosed_quote_line

    bad = tmp_path / "bad.csv"
    bad.write_text('question,answer\n"what is 1+1,2\nwhat is 2+2,4\n')  # line 2 opens a quote, nothing closes it
    with pytest.raises(DataError, match=r"bad.csv: line 2: a quote opened here never closes"):
        open_dataset(str(bad))
    ok = tmp_path / "ok.csv"
    ok.write_text('question,answer\n"a ""quoted"" word, and a\nsecond line",1\nplain,2\n')  # escaped quotes, 2-line cell
    assert unclosed_quote_line(str(ok)) is None
    assert open_dataset(str(ok), cache_dir=str(tmp_path / "c")).num_rows == 2


def _pyav_clip(path, frames: int, fps: int = 10, size: int = 32):
    """A real H.264 mp4 written with PyAV: `frames / fps` seconds long."""
    import av
    import numpy as np

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = size, size, "yuv420p"
        for t in range(frames):
            for packet in s.encode(av.VideoFrame.from_ndarray(np.full((size, size, 3), 8 * t, np.uint8), format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def test_a_segment_ending_after_its_clip_is_a_bad_row(tmp_path, caplog):
    """The clip's length comes from the container header; a clip whose length cannot be read keeps its rows."""
    from mmrlvr.data.frame_times import container_duration

    clip = _pyav_clip(tmp_path / "a.mp4", frames=25)  # 25 frames at 10 fps: 2.5 s
    assert container_duration(str(clip)) == pytest.approx(2.5)
    (tmp_path / "odd.mp4").write_bytes(b"not a video at all")  # no header: length unknown, row kept
    rows = [{"video": "a.mp4", "query": "fits", "timestamp": [0.5, 2.0]},
            {"video": "a.mp4", "query": "too late", "timestamp": [1.0, 3.0]},  # 3.0 > 2.5 + 0.1 slack
            {"video": "a.mp4", "query": "rounded", "timestamp": [1.0, 2.6]},  # 2.6 <= 2.5 + 0.1: kept
            {"video": "odd.mp4", "query": "unknown length", "timestamp": [0, 9]},
            {"video": "a.mp4", "query": "starts after", "timestamp": [4, 5]}]
    ann = tmp_path / "g.jsonl"
    ann.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("temporal_grounding", "train", 10, 0, data=str(ann), holdout_frac=0.0, max_bad_frac=0.5)
    assert [s.reference for s in got] == [[0.5, 2.0], [1.0, 2.6], [0.0, 9.0]]
    lines = [r.getMessage() for r in caplog.records]
    assert f"{ann}: row 1 skipped: field 'timestamp': segment [1.0, 3.0] ends after the clip's 2.50 s ({clip})" in lines
    assert f"{ann}: row 4 skipped: field 'timestamp': segment [4, 5] ends after the clip's 2.50 s ({clip})" in lines


def test_a_referring_box_outside_its_image_is_a_bad_row(tmp_path, caplog):
    """The image size comes from the PNG header; an image whose header cannot be read keeps its row."""
    Image.new("RGB", (60, 40)).save(tmp_path / "a.png")
    (tmp_path / "broken.png").write_bytes(b"not an image")  # bad media, reported when decoded
    rows = [{"image": "a.png", "question": "the dog", "answer": [5, 5, 50, 30]},
            {"image": "a.png", "question": "too wide", "answer": [5, 5, 61, 30]},  # x2 61 > width 60
            {"image": "a.png", "question": "edge to edge", "answer": [0, 0, 60, 40]},  # the whole image: kept
            {"image": "a.png", "question": "too low", "answer": [10, 35, 20, 45]},  # y2 45 > height 40
            {"image": "broken.png", "question": "unknown size", "answer": [0, 0, 90, 90]}]
    path = tmp_path / "ref.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("grounding", "train", 10, 0, data=str(path), holdout_frac=0.0, max_bad_frac=0.5,
                        cache_dir=str(tmp_path / "c"))
    assert [s.meta["row"] for s in got] == [0, 2, 4]
    lines = [r.getMessage() for r in caplog.records]
    assert f"{path}: row 1 skipped: field 'answer': box [5.0, 5.0, 61.0, 30.0] lies outside the 60x40 image" in lines
    assert f"{path}: row 3 skipped: field 'answer': box [10.0, 35.0, 20.0, 45.0] lies outside the 60x40 image" in lines
    # xywh: [40, 10, 25, 10] ends at x = 65 > 60; the same numbers as xyxy would be inverted instead
    path.write_text(json.dumps({"image": "a.png", "question": "q", "answer": [40, 10, 25, 10]}) + "\n"
                    + json.dumps({"image": "a.png", "question": "q", "answer": [4, 4, 10, 10]}) + "\n")
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("grounding", "train", 10, 0, data=str(path), holdout_frac=0.0, max_bad_frac=0.5,
                        cache_dir=str(tmp_path / "c2"), box_format="xywh")
    assert [s.reference for s in got] == [[4.0, 4.0, 14.0, 14.0]]
    assert f"{path}: row 0 skipped: field 'answer': box [40.0, 10.0, 65.0, 20.0] lies outside the 60x40 image" in \
        [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("spelled", ["<|image_pad|>", "<|im_start|>assistant", "<start_of_image>", "<end_of_turn>"])
def test_a_question_spelling_a_special_token_is_a_bad_row_not_a_run_stop(tmp_path, caplog, spelled):
    rows = [{"question": f"<image>q{i}?", "answer": "1"} for i in range(4)]
    rows[2]["question"] = f"<image>what is {spelled} here?"
    path, args = _geometry(tmp_path, rows, max_bad_frac=0.5)
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("geometry", "train", 10, 0, **args)
    assert [s.meta["row"] for s in got] == [0, 1, 3]
    token = spelled.split("assistant")[0]
    assert f"{path}: row 2 skipped: its text spells the special token {token!r}, which a prompt must not carry" in \
        [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("name", ["x" * 5000 + ".png", "a/" * 3000 + "b.png"])
def test_a_path_the_file_system_cannot_look_up_is_a_bad_row(tmp_path, caplog, name):
    rows = [{"question": f"<image>q{i}?", "answer": "1"} for i in range(4)]
    rows[1]["image"] = name
    path, args = _geometry(tmp_path, rows, max_bad_frac=0.5)
    with caplog.at_level(logging.WARNING, logger="mmrlvr.data"):
        got = load_task("geometry", "train", 10, 0, **args)
    assert [s.meta["row"] for s in got] == [0, 2, 3]
    line = next(r.getMessage() for r in caplog.records if "row 1 skipped" in r.getMessage())
    assert line.startswith(f"{path}: row 1 skipped: image is not a usable path (OSError: ") and len(line) < 400
