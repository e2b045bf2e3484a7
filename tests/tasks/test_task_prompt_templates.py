"""`prompt_template` and `system_prompt` on the synthetic and video tasks: the template's text
replaces the question, media slots stay where the task puts them, a row's `prompt` column wins."""

import json

import pytest

from mmrlvr.data.io import DataError
from mmrlvr.tasks import load_task
from tests.tasks.test_prompt_pins import _clip

# task: (extra build args, template, the user turn's text parts (None = a media slot) of sample 0)
CASES = {
    "counting": ({}, "{{ question }} Colour: {{ color }}. {{ answer_format }}",
                 [None, "How many red shapes are in the image? Colour: red. Answer as <answer>N</answer>."]),
    "marked_cell": ({}, "{{ options | join('/') }}? <answer>",
                    [None, "red/orange/yellow/green/blue/purple? <answer>"]),
    "video_motion": ({}, "Options {{ options | length }}: {{ options[2] }}... {{ answer_format }}",
                     [None, "Options 4: up... Answer as <answer>direction</answer>."]),
    # k=4 labels A-D: the example is the reversed labels "D, C, B, A"; the "A:" <video> pairs stay
    "frame_order": ({"k": 4}, "{{ k }} clips {{ labels | join('') }}, e.g. <answer>{{ example }}</answer>",
                    ["A:", None, "B:", None, "C:", None, "D:", None, "4 clips ABCD, e.g. <answer>D, C, B, A</answer>"]),
}


def _parts(sample):
    user = sample.messages[-1]
    assert user["role"] == "user"
    return [c.get("text") for c in user["content"]]


@pytest.mark.parametrize("task", sorted(CASES))
def test_template_and_system_prompt_on_synthetic_tasks(task, tmp_path):
    args, text, parts = CASES[task]
    (tmp_path / "t.jinja").write_text(text + "\n")
    got = load_task(task, "train", 3, seed=1, eval_size=2, prompt_template=str(tmp_path / "t.jinja"),
                    system_prompt="Look closely.", **args)
    assert _parts(got[0]) == parts
    assert all(s.messages[0] == {"role": "system", "content": [{"type": "text", "text": "Look closely."}]} for s in got)
    plain = load_task(task, "train", 3, seed=1, eval_size=2, **args)  # the same boards, references and media
    assert [s.reference for s in got] == [s.reference for s in plain]
    assert [len(s.images) + len(s.videos) for s in got] == [len(s.images) + len(s.videos) for s in plain]


def test_cell_tally_template_sees_the_sample_colour(tmp_path):
    (tmp_path / "t.jinja").write_text("Count {{ color }} on a {{ grid }}x{{ grid }} board. <think></think><answer>")
    got = load_task("cell_tally", "train", 4, seed=2, eval_size=2, grid=3, prompt_template=str(tmp_path / "t.jinja"))
    assert [_parts(s) for s in got] == [[None, f"Count {s.meta['target']} on a 3x3 board. <think></think><answer>"] for s in got]
    assert len({s.meta["target"] for s in got}) > 1  # per-sample fields, not one fixed text


def test_video_rows_template_prompt_column_and_missing_field(shared_data, tmp_path):
    ann = shared_data / "video_qa_nextqa" / "val_temporal_sample.jsonl"
    rows = [json.loads(x) for x in ann.read_text().splitlines()[:2]]
    for row in rows:
        _clip(tmp_path / f"{row['video']}.mp4")
    rows[1]["prompt"] = "Own words. <answer>X</answer>"
    (tmp_path / "n.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "t.jinja").write_text("[{{ type }}] {{ question }} {{ answer_hint }}")
    with pytest.raises(DataError, match=r"1 of 2 rows are bad .*first: row 0: prompt_template .*t.jinja: 'answer_hint' is undefined; fields: answer_format, options, options_text, question, type"):
        load_task("nextqa", "train", 2, seed=0, video_dir=str(tmp_path), data=str(tmp_path / "n.jsonl"), holdout_frac=0.0,
                  max_bad_frac=0.0, prompt_template=str(tmp_path / "t.jinja"))
    (tmp_path / "t.jinja").write_text("[{{ type }}] {{ question }}\n{{ options_text }}\nLetter: <answer>X</answer>")
    got = load_task("nextqa", "train", 2, seed=0, video_dir=str(tmp_path), data=str(tmp_path / "n.jsonl"), holdout_frac=0.0,
                    prompt_template=str(tmp_path / "t.jinja"))
    r = rows[0]
    lines = "\n".join(f"{'ABCDE'[i]}. {r[f'a{i}']}" for i in range(5))
    assert _parts(got[0]) == [None, f"[{r['type']}] {r['question'].strip()}?\n{lines}\nLetter: <answer>X</answer>"]
    assert _parts(got[1]) == [None, "Own words. <answer>X</answer>"]  # the row's prompt column wins
    (tmp_path / "g.jsonl").write_text(json.dumps({"video": f"{r['video']}.mp4", "sentence": " it starts ", "timestamp": [0, 1]}))
    (tmp_path / "g.jinja").write_text("Find '{{ query }}'. {{ answer_format }}")
    got = load_task("temporal_grounding", "train", 1, seed=0, data=str(tmp_path / "g.jsonl"), holdout_frac=0.0,
                    prompt_template=str(tmp_path / "g.jinja"), system_prompt="Seconds only.")
    assert got[0].messages[0]["content"][0]["text"] == "Seconds only."
    assert _parts(got[0]) == [None, "Find 'it starts'. Answer with the start and end time in seconds as <answer>[start, end]</answer>."]
