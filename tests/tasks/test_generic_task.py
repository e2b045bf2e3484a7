"""The generic task: the user's rows (prompt or question, images and/or videos, a reference) mapped
by `columns` and scored by the verifier they name; its settings are checked before any row is read."""

import json

import pytest
from PIL import Image

from mmrlvr.config import load_config
from mmrlvr.data.io import DataError
from mmrlvr.tasks import load_task
from mmrlvr.checks.validate import config_errors
from mmrlvr.verifiers.base import resolve_verifier
from tests.tasks.test_video_tasks import _write_clip


def _rows(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_image_rows_with_renamed_columns_keep_their_reference_and_extra_columns(tmp_path):
    (tmp_path / "pics").mkdir()
    for name in ("a", "b"):
        Image.new("RGB", (56, 56), "white").save(tmp_path / "pics" / f"{name}.png")
    path = _rows(tmp_path, [
        {"pic": ["a.png", "b.png"], "ask": "Compare <image2> with <image1>: how many dots?", "gold": 3, "level": 2},
        {"pic": ["a.png"], "ask": "Where is the dot?", "gold": [1, 2, 30, 40], "level": 5},
    ])
    got = load_task("generic", "train", 10, 0, data=path, verifier="iou", holdout_frac=0.0, image_root=str(tmp_path / "pics"),
                    columns={"image": "pic", "question": "ask", "answer": "gold"}, cache_dir=str(tmp_path / "c"))
    first, second = got
    assert first.reference == "3" and second.reference == [1, 2, 30, 40]  # a number as text, a box as a list
    assert first.verifier == second.verifier == "iou" and first.meta["columns"] == {"level": 2}
    # <image2> is placed before <image1>, as in the image tasks
    assert first.images == (str(tmp_path / "pics" / "b.png"), str(tmp_path / "pics" / "a.png"))
    content = first.messages[0]["content"]
    assert [c["type"] for c in content] == ["text", "image", "text", "image", "text", "text"]
    assert content[-1]["text"] == "\nGive the final answer inside <answer></answer>."
    assert second.target == "<answer>[1, 2, 30, 40]</answer>"
    assert resolve_verifier("iou")("<answer>[1, 2, 30, 40]</answer>", second).score == 1.0


def test_video_rows_and_a_prompt_column(tmp_path):
    (tmp_path / "clips").mkdir()
    _write_clip(tmp_path / "clips" / "a.mp4", frames=20)
    path = _rows(tmp_path, [
        {"video": "a.mp4", "prompt": "Does it get brighter? Reply <answer>yes</answer> or <answer>no</answer>.", "answer": "yes"},
        {"video": "gone.mp4", "prompt": "Is it dark?", "answer": "no"},
    ])
    got = load_task("generic", "train", 10, 0, data=path, verifier="exact", holdout_frac=0.0, video_dir=str(tmp_path / "clips"),
                    nframes=4, max_bad_frac=0.5, cache_dir=str(tmp_path / "c"))
    (s,) = got
    assert s.messages == ({"role": "user", "content": [
        {"type": "video"}, {"type": "text", "text": "Does it get brighter? Reply <answer>yes</answer> or <answer>no</answer>."}]},)
    assert s.videos[0].path == str(tmp_path / "clips" / "a.mp4") and s.videos[0].nframes == 4 and s.images == ()
    frames, _ = s.videos[0].load()
    assert len(frames) == 4
    assert got.skipped == [{"row": 1, "reason": f"video file not found: {tmp_path / 'clips' / 'gone.mp4'} (relative paths "
                                                "start from task.args.video_dir, by default the data file's folder)"}]


def test_settings_and_columns_are_named_before_any_row_is_built(tmp_path):
    path = _rows(tmp_path, [{"image": "x.png", "text": "hi", "answer": "1"}])
    with pytest.raises(DataError) as err:
        load_task("generic", "train", 10, 0, data=path, verifier="nubmer")
    assert str(err.value).startswith("task.args.verifier='nubmer': a registered verifier; known: boxes, choice, count,")
    with pytest.raises(DataError) as err:
        load_task("generic", "train", 10, 0, data=path, verifier="number", cache_dir=str(tmp_path / "c"))
    assert str(err.value) == (f"{path}: no column for 'question' or 'prompt' (looked for 'question', 'problem', "
                              "'query', 'prompt'); columns: image, text, answer; set task.args.columns.question")
    with pytest.raises(DataError, match=r"no column for 'answer' \(looked for 'gold'\); no column for 'image' \(looked for "
                                        r"'pic'\); columns: image, text, answer; set task.args.columns.answer, task.args.columns.image"):
        load_task("generic", "train", 10, 0, data=path, verifier="number", cache_dir=str(tmp_path / "c"),
                  columns={"question": "text", "answer": "gold", "image": "pic"})
    cfg = load_config(None, ["task.name=generic", "task.args.verifier=nubmer", "warm_start.steps=0"])
    errs = config_errors(cfg)
    assert any(e.startswith("task.args.data=None: the rows file") for e in errs)
    assert any(e.startswith("task.args.verifier='nubmer': a registered verifier; known: ") for e in errs)
    cfg = load_config("configs/generic_tiny.yaml", ["task.args.columns.imgae=photo"])
    assert config_errors(cfg) == ["task.args.columns.imgae='photo': not a column key of task 'generic'; known: prompt, "
                                  "question, image, video, answer, id"]


def test_a_template_that_asks_for_no_answer_format_is_named_for_the_generic_verifier(tmp_path):
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{{ question }} Reply with a number.")  # the `number` verifier reads <answer> (or \boxed, ...)
    cfg = load_config("configs/generic_tiny.yaml", [f"task.args.prompt_template={tpl}"])
    assert config_errors(cfg) == [f"task.args.prompt_template={str(tpl)!r}: a template that asks for the answer format: "
                                  "verifier 'number' needs <answer> (or \\boxed{}, or 'answer is')"]
    tpl.write_text("{{ question }} Give the number inside <answer></answer>.")
    assert config_errors(cfg) == []


def test_mmrlvr_tasks_lists_data_as_required_and_verifier_unless_rewards(capsys):
    from mmrlvr.cli import main

    assert main(["tasks", "generic"]) == 0
    out = capsys.readouterr().out
    assert "  data = (required)\n  verifier = None (required unless rewards: score the rows)\n" in out and "  video_dir = None" in out


def test_rows_may_mix_image_video_and_text_only(tmp_path):
    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")
    _write_clip(tmp_path / "a.mp4", frames=20)
    path = _rows(tmp_path, [{"image": "a.png", "video": None, "question": "What colour?", "answer": "white"},
                            {"image": None, "video": "a.mp4", "question": "Brighter?", "answer": "yes"},
                            {"image": None, "video": None, "question": "2 + 2?", "answer": 4}])
    got = load_task("generic", "train", 10, 0, data=path, verifier="exact", holdout_frac=0.0, max_bad_frac=0.0,
                    cache_dir=str(tmp_path / "c"))
    assert [(len(s.images), len(s.videos), s.reference) for s in got] == [(1, 0, "white"), (0, 1, "yes"), (0, 0, "4")]
