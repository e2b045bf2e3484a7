"""Task arguments are named and checked before the model loads; `mmrlvr tasks` lists them."""

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.validate import config_errors


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
    assert "  box_format = 'xyxy'" in out and "  max_bad_frac = 0.01" in out
    assert "columns: image <- image, images, filename" in out and "answer <- answer, bbox, box, solution" in out
    assert "  model_type = from the model's config" in out
    assert out.count("\n\nnextqa: ") == 1 and "  video_dir = None" in out
