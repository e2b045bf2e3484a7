"""The up-front answer-format check: a template or a `prompt` column that never asks for what the
scoring verifiers read (configured rewards, else each sample's own verifier) is named in one line."""

import csv
import json

from hypothesis import given, strategies as st

from mmrlvr.config import load_config
from mmrlvr.data.prompt_formats import EXACT_TAGS, EXTRACTING, missing_formats
from mmrlvr.checks.validate import config_errors


def _errors(config, *overrides):
    return config_errors(load_config(config, list(overrides)))


def test_each_samples_own_verifier_is_checked_when_no_rewards_are_configured(tmp_path):
    tpl = tmp_path / "c.jinja"
    tpl.write_text("{{ question }} Reply with just the number.")  # no <answer>
    # quickstart (counting, no rewards:): the samples' own `count` needs the exact tag
    assert _errors("configs/quickstart.yaml", f"task.args.prompt_template={tpl}") == [
        f"task.args.prompt_template={str(tpl)!r}: a template that asks for the answer format: verifier 'count' needs <answer>"]
    # video_motion's samples are scored by `choice`: \boxed{} is an answer it extracts
    assert _errors("configs/video_motion_tiny.yaml", f"task.args.prompt_template={tpl}") == [
        f"task.args.prompt_template={str(tpl)!r}: a template that asks for the answer format: "
        "verifier 'choice' needs <answer> (or \\boxed{}, or 'answer is')"]
    # {{ answer_format }} renders the task's own instruction, which asks for <answer>
    tpl.write_text("Clip: {{ question }} {{ answer_format }}")
    assert _errors("configs/video_motion_tiny.yaml", f"task.args.prompt_template={tpl}") == []
    # ... except under template=plain, where the instruction is empty (geometry: choice and math)
    assert _errors("configs/geometry_tiny.yaml", f"task.args.prompt_template={tpl}", "task.args.template=plain") == [
        f"task.args.prompt_template={str(tpl)!r}: a template that asks for the answer format: "
        "verifier 'choice' needs <answer> (or \\boxed{}, or 'answer is'); verifier 'math' needs <answer> (or \\boxed{}, or 'answer is')"]
    tpl.write_text("{{ question }} Put it in \\boxed{}.")
    assert _errors("configs/video_motion_tiny.yaml", f"task.args.prompt_template={tpl}") == []
    # configured rewards replace the sample's own verifier: `exact` reads \boxed{}, so no line
    assert _errors("configs/quickstart.yaml", f"task.args.prompt_template={tpl}", "rewards=[{verifier: exact}]") == []
    # ... but an eval verifier that needs the tag still does
    assert _errors("configs/quickstart.yaml", f"task.args.prompt_template={tpl}", "rewards=[{verifier: exact}]",
                   "eval.verifiers=[count]") == [
        f"task.args.prompt_template={str(tpl)!r}: a template that asks for the answer format: verifier 'count' needs <answer>"]


def test_the_first_rows_prompt_column_is_checked(tmp_path):
    rows = [{"video": "v", "question": "q", "answer": 0, **{f"a{i}": str(i) for i in range(5)}, "prompt": p}
            for p in ("Pick one. <answer>X</answer>", "", "Pick one letter.", "No format either.")]
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # row 1 has an empty prompt (the shipped wording is used); row 2 is the first that asks for nothing
    errs = _errors("configs/video_qwen2.5vl_3b.yaml", f"task.args.data={data}", "task.args.video_dir=.")
    assert [e for e in errs if "(the prompt)" in e] == [
        f"task.args.data={str(data)!r}: row 2, column 'prompt' (the prompt) asks for no answer format: "
        "verifier 'choice' needs <answer> (or \\boxed{}, or 'answer is')"]
    # a renamed prompt column (geometry: columns.prompt) is read under its own name, from a CSV too
    with open(tmp_path / "g.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["image", "question", "answer", "ask"])
        w.writeheader()
        w.writerows([{"image": "a.png", "question": "q", "answer": "3", "ask": "Area? <answer>N</answer>"},
                     {"image": "a.png", "question": "q", "answer": "4", "ask": "Area, please."}])
    errs = _errors("configs/geometry_tiny.yaml", f"task.args.data={tmp_path / 'g.csv'}", "task.args.columns.prompt=ask")
    assert [e for e in errs if "(the prompt)" in e] == [
        f"task.args.data={str(tmp_path / 'g.csv')!r}: row 1, column 'ask' (the prompt) asks for no answer format: "
        "verifier 'choice' needs <answer> (or \\boxed{}, or 'answer is'); verifier 'math' needs <answer> (or \\boxed{}, or 'answer is')"]


def test_missing_formats_per_verifier():
    assert missing_formats("The answer is [1, 2].", ["tiou", "order", "iou"]) == []
    assert missing_formats("<answer>[s, e]</answer>", ["tiou", "format", "count", "tiou"]) == ["verifier 'format' needs <think>"]
    assert missing_formats("Say when.", ["tiou", "my.module:fn"]) == ["verifier 'tiou' needs <answer> (or \\boxed{}, or 'answer is')"]

KNOWN = sorted(set(EXACT_TAGS) | set(EXTRACTING))


@given(st.text(max_size=40), st.text(max_size=40), st.lists(st.sampled_from(KNOWN), max_size=6))
def test_a_text_with_both_tags_satisfies_every_verifier_and_one_without_satisfies_none(before, after, verifiers):
    assert missing_formats(f"{before}<THINK></think>{after}<Answer>x</answer>", verifiers) == []  # tags in any case
    bare = (before + after).lower()
    if not any(m in bare for m in ("<answer>", "\\boxed", "answer is", "answer:", "<think>")):
        # each distinct verifier is named at least once, in the order given
        named = [line.split("'")[1] for line in missing_formats(before + after, verifiers)]
        assert list(dict.fromkeys(named)) == list(dict.fromkeys(verifiers))
