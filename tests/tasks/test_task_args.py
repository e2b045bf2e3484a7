"""Task arguments are named and checked before the model loads; `mmrlvr tasks` lists them."""

import json

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors


def _errors(*overrides):
    return config_errors(load_config("configs/geometry_tiny.yaml", list(overrides)))


def test_a_typo_inside_columns_is_named_with_the_known_keys():
    assert _errors("task.args.columns.questoin=q") == [
        "task.args.columns.questoin='q': not a column key of task 'geometry'; known: image, question, answer, options, id, prompt"]
    assert _errors("task.args.columns.question=q") == []


def test_box_format_template_and_answer_tags_are_checked_up_front(tmp_path):
    errs = config_errors(load_config("configs/grounding_tiny.yaml", ["task.args.box_format=coco", "task.args.template=cot"]))
    assert errs == ["task.args.box_format='coco': one of xyxy, xywh, xyxy_norm, xywh_norm",
                    "task.args.template='cot': one of answer, think, plain"]
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{{ question }} Answer inside <answer></answer>.")  # no <think> for the format reward
    assert _errors(f"task.args.prompt_template={tpl}", "rewards=[{verifier: format}, {verifier: choice}]") == [
        f"task.args.prompt_template={str(tpl)!r}: a template that asks for the answer format: verifier 'format' needs <think>"]
    assert _errors(f"task.args.prompt_template={tpl}", "rewards=[{verifier: choice}]") == []
    assert _errors("task.args.prompt_template=missing.jinja") == [
        "task.args.prompt_template='missing.jinja': file not found (a Jinja template)"]


def test_mmrlvr_tasks_lists_arguments_defaults_and_column_keys(capsys):
    assert main(["tasks", "grounding", "nextqa"]) == 0
    out = capsys.readouterr().out
    assert "  box_format = 'xyxy'" in out and "  max_bad_frac = None (1% of the rows, at least one row)" in out
    assert "columns: image <- image, images, filename" in out and "answer <- answer, bbox, box, solution" in out
    assert "  model_type = from the model's config" in out
    assert out.count("\n\nnextqa: ") == 1 and "  video_dir = None" in out


def test_mmrlvr_tasks_says_a_description_to_the_end_of_its_sentence(capsys):
    """frame_order's first sentence runs over two docstring lines: it is listed whole, not cut at the break."""
    from mmrlvr.tasks._catalogue import summary

    assert main(["tasks", "frame_order"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("frame_order: Frame order: a clip cut into k segments, shown shuffled and labelled A, B, C...; "
                     "answer their true order (\"C, A, B\"), scored by the `order` verifier (Kendall tau, or "
                     "`metric: exact`)."), first
    assert summary("Scores boxes, e.g. IoU 0.5.\nSecond sentence. Third.") == "Scores boxes, e.g. IoU 0.5."
    assert summary("no end\n  on two lines\n\nAnother paragraph.") == "no end on two lines"
    assert summary(None) == ""


def test_grounding_warm_start_on_real_rows_says_what_to_do_or_uses_the_references(tmp_path):
    from PIL import Image

    from mmrlvr.tasks import load_task

    Image.new("RGB", (200, 100)).save(tmp_path / "a.jpg")
    (tmp_path / "g.jsonl").write_text(json.dumps({"image": "a.jpg", "question": "the dog", "answer": [20, 10, 60, 50]}) + "\n")
    data = f"task.args.data={tmp_path / 'g.jsonl'}"
    errs = config_errors(load_config("configs/grounding_tiny.yaml", [data]))
    assert errs == ["warm_start.steps=300: grounding on real rows (task.args.data) has no teacher boxes in absolute units "
                    "(qwen2_5_vl answers in pixels of the resized image); set warm_start.steps=0 to start RL from the "
                    "loaded model, task.args.coords=norm1000 to warm-start on the reference boxes, or warm_start.checkpoint"]
    assert config_errors(load_config("configs/grounding_tiny.yaml", [data, "warm_start.steps=0"])) == []
    assert config_errors(load_config("configs/grounding_tiny.yaml", [data, "task.args.coords=norm1000"])) == []
    s = load_task("grounding", "train", 1, 0, data=str(tmp_path / "g.jsonl"), coords="norm1000", holdout_frac=0.0,
                  cache_dir=str(tmp_path / "c"))[0]
    # [20, 10, 60, 50] on a 200x100 image: x / 200 * 1000 and y / 100 * 1000 -> [100, 100, 300, 500]
    assert s.target == "<answer>[100, 100, 300, 500]</answer>"


def test_small_held_out_splits_are_flagged_where_results_print():
    from mmrlvr.data.heldout import small_split_note
    from mmrlvr.recipe.eval_cli import format_table

    # 3 rows: one answer is 100 / 3 = 33 points
    assert small_split_note(3) == (" (only 3 held-out rows: one answer moves accuracy by 33 points; "
                                   "use eval_data or a larger holdout_frac for >= 30)")
    assert small_split_note(30) == "" and small_split_note(None) == ""
    from rich.console import Console

    from mmrlvr.train.progress import Progress

    console = Console(record=True, width=400)
    progress = Progress(1, enabled=True)
    progress.console = console
    progress.close({"eval_before": {"accuracy": 0.5}, "eval_after": {"accuracy": 0.25, "n": 4}, "run_dir": "r"})
    # the end-of-run line keeps the note (rich would swallow it as markup in square brackets)
    assert "(-25.0 points, n=4) (only 4 held-out rows: one answer moves accuracy by 25 points;" in console.export_text()
    table = format_table({"accuracy": 0.5, "n": 4})
    assert table.splitlines()[-1] == "note          only 4 held-out rows: one answer moves accuracy by 25 points; use eval_data or a larger holdout_frac for >= 30"
