"""The user's own prompt: a Jinja template file, a `prompt` column, a system prompt; extra columns
reach verifiers; and the shipped default prompts stay byte-identical."""

import hashlib
import json
import subprocess
import sys

import pytest

from mmrlvr.data.io import DataError
from mmrlvr.data.prompts import missing_tags, prompt_spec
from mmrlvr.tasks import load_task
from tests.conftest import SHARED_DATA_HELP, shared_data_path

D = shared_data_path()
needs_data = pytest.mark.skipif(not D.is_dir(), reason=SHARED_DATA_HELP)

# sha256 (first 16 hex) of json.dumps([s.messages for s in 16 train samples], sort_keys=True),
# taken from the prompts as shipped before templates existed: same text, same tokens, same numbers
PINNED = {
    ("geometry", ()): "65cac05cf65da980",
    ("chart", ()): "b2a1d947fc287489",
    ("grounding", (("n_shapes", 1),)): "c9d3772dbdc9c76a",
    ("geometry", (("template", "think"),)): "e75264dba5fd6959",
    ("chart", (("template", "plain"),)): "4028bb9ebaf05693",
}
PINNED_REAL = {
    ("geometry", "geometry_mathv/annotations.jsonl", None): "71b0179f04ed0e91",
    ("chart", "chart_mathv_statistics/annotations.jsonl", None): "005950754e619c0b",
    ("grounding", "grounding_raccoon/annotations.jsonl", "grounding_raccoon/images"): "d43a2259385d468b",
}


def _digest(samples) -> str:
    return hashlib.sha256(json.dumps([s.messages for s in samples], sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("task,args", list(PINNED))
def test_default_prompts_are_unchanged(task, args):
    assert _digest(load_task(task, "train", 16, 0, **dict(args))) == PINNED[(task, args)]


@needs_data
@pytest.mark.parametrize("task,data,root", list(PINNED_REAL))
def test_default_prompts_on_real_data_are_unchanged(task, data, root, tmp_path):
    extra = {"image_root": str(D / root)} if root else {}
    got = load_task(task, "train", 16, 0, data=str(D / data), holdout_frac=0.0, cache_dir=str(tmp_path), **extra)
    assert _digest(got) == PINNED_REAL[(task, data, root)]


@needs_data
def test_template_file_system_prompt_and_extra_columns_on_mathv(tmp_path):
    tpl = tmp_path / "p.jinja"
    tpl.write_text("[{{ subject }}, level {{ columns.level }}] {{ question }}\n"
                   "{% if options %}{{ options_text }}\n{% endif %}Reply as <answer>X</answer>.")
    got = load_task("geometry", "train", 50, 0, data=str(D / "geometry_mathv" / "annotations.jsonl"), holdout_frac=0.0,
                    prompt_template=str(tpl), system_prompt="You are a careful geometer.", cache_dir=str(tmp_path / "c"))
    rows = {str(json.loads(x)["id"]): json.loads(x) for x in (D / "geometry_mathv" / "annotations.jsonl").read_text().splitlines()}
    s = next(x for x in got if x.meta["options"])
    row = rows[s.id.split(":")[1]]
    system, user = s.messages
    assert system == {"role": "system", "content": [{"type": "text", "text": "You are a careful geometer."}]}
    texts = [c["text"] for c in user["content"] if c["type"] == "text"]
    assert texts[0].startswith(f"[{row['subject']}, level {row['level']}]")  # extra columns rendered
    assert texts[-1].endswith("Choices: (A) " + str(row["options"][0]) + " (B) " + str(row["options"][1]) + " "
                              + " ".join(f"({'ABCDE'[i]}) {o}" for i, o in enumerate(row["options"]) if i > 1)
                              + "\nReply as <answer>X</answer>.")
    assert s.meta["columns"]["level"] == row["level"] and s.meta["columns"]["subject"] == row["subject"]
    assert "answer" not in s.meta["columns"]  # the reference is never a free column


def test_prompt_column_wins_and_a_missing_field_names_the_template(tmp_path):
    from PIL import Image

    Image.new("RGB", (56, 56), "white").save(tmp_path / "a.png")
    rows = [{"image": "a.png", "question": "q?", "answer": "3", "prompt": "Count it. <answer>N</answer>"},
            {"image": "a.png", "question": "q2?", "answer": "4", "prompt": ""}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{{ question }} {{ nope }}")
    with pytest.raises(DataError, match=r"prompt_template .*t.jinja: 'nope' is undefined; fields: answer_format, columns"):
        load_task("geometry", "train", 2, 0, data=str(tmp_path / "d.jsonl"), holdout_frac=0.0, prompt_template=str(tpl),
                  max_bad_frac=0.0, cache_dir=str(tmp_path / "c"))  # row 1 renders the template (row 0 has a prompt)
    got = load_task("geometry", "train", 2, 0, data=str(tmp_path / "d.jsonl"), holdout_frac=0.0, cache_dir=str(tmp_path / "c"))
    assert got[0].messages[0]["content"][1] == {"type": "text", "text": "Count it. <answer>N</answer>"}
    # an empty prompt cell falls back to the default wording
    assert [c.get("text") for c in got[1].messages[0]["content"]] == [None, "q2?", "\nGive the final answer inside <answer></answer>."]


def test_bad_template_files_are_named_before_any_row(tmp_path):
    with pytest.raises(ValueError, match="prompt_template 'nope.jinja': file not found"):
        prompt_spec("answer", "nope.jinja")
    (tmp_path / "b.jinja").write_text("ok\n{{ question ")
    with pytest.raises(ValueError, match=r"b.jinja:2: unexpected end of template"):
        prompt_spec("answer", str(tmp_path / "b.jinja"))
    assert missing_tags("say <answer>N</answer>", ["count", "format"]) == ["verifier 'format' needs <think>"]


@pytest.mark.slow
def test_custom_template_through_a_full_mmrlvr_train_step(tmp_path):
    tpl = tmp_path / "area.jinja"
    tpl.write_text("AREA QUIZ. {{ question }}{% if options %} {{ options_text }}{% endif %} Reply <answer>N</answer>.")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "mmrlvr.cli", "train", "configs/geometry_tiny.yaml",
           "task.train_size=8", "task.eval_size=2", "warm_start.steps=1", "warm_start.batch_size=2",
           "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "train.steps=1",
           "train.log_every=1", "eval.batch_size=2", "verifier_workers=0", "train.log_with=[]",
           f"task.args.prompt_template={tpl}", "task.args.system_prompt=Be brief.", f"output_dir={out}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    row = json.loads((out / "samples" / "step_1.jsonl").read_text().splitlines()[0])
    assert row["prompt_text"].startswith("Be brief.\nAREA QUIZ. The figure is drawn on a grid")
    assert json.loads((out / "summary.json").read_text())["steps"] == 1


def test_eval_report_examples_carry_prompt_text_and_a_readable_reference():
    from mmrlvr.data.prompts import example_fields
    from mmrlvr.types import Sample

    msgs = ({"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Find x."},
                                         {"type": "text", "text": "\nChoices: (A) 3 cm (B) 12 cm (C) 5 cm"}]})
    s = Sample("m:1", msgs, "B", "choice", meta={"options": ["3 cm", "12 cm", "5 cm"]})
    assert example_fields(s) == {"prompt_text": "Be brief.\nFind x.\nChoices: (A) 3 cm (B) 12 cm (C) 5 cm",
                                 "reference": "B (12 cm)"}  # B is the second option
    free = Sample("m:2", msgs[1:], "7", "math", meta={"options": []})
    assert example_fields(free)["reference"] == "7"
