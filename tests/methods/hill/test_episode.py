"""The hill episode's prompts (hinted question, hinter prompt) and its settings' validation."""

import dataclasses

import pytest

from mmrlvr.config import load_config
from mmrlvr.rollout.episodes import episode_for
from mmrlvr.methods.hill.episode import HINTER_TEMPLATE, HillSettings, hinted_sample, hinter_sample, settings_of
from mmrlvr.types import Sample
from mmrlvr.checks.validate import config_errors

SAMPLE = Sample("s1", ({"role": "system", "content": "Reason, then answer."},
                       {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  How many dots?  "}]}),
                reference=3, meta={"solution": "Count the rows: 3."}, target="<answer>3</answer>")


def test_hinted_prompt_appends_the_hint_after_a_blank_line():
    h = hinted_sample(SAMPLE, "  Look at the top row. ", 2)
    assert h.id == "s1#hint2" and h.reference == 3 and h.messages[0] == SAMPLE.messages[0]  # system turn kept
    assert h.messages[1]["content"] == [{"type": "image"}, {"type": "text", "text": "How many dots?\n\nLook at the top row."}]
    text_only = dataclasses.replace(SAMPLE, messages=({"role": "user", "content": "Q?"},))
    assert hinted_sample(text_only, "h", 0).messages[0]["content"] == "Q?\n\nh"


def test_hinter_prompt_is_the_template_with_media_first():
    s = hinter_sample(SAMPLE, "<answer>5</answer>")
    assert s.id == "s1#hinter" and s.target is None and len(s.messages) == 1  # no system turn (HT:291)
    content = s.messages[0]["content"]
    assert content[0] == {"type": "image"}
    text = content[1]["text"]
    assert text.startswith("You are a Pedagogical Hint Generator for a Mathematical Reasoner.\nTASK: GENERATE A MINIMAL HINT")
    assert "1) Original Question:\n  How many dots?  \n\n2) Reasoner's Failed Attempt:\n<answer>5</answer>\n" in text
    assert "(Hidden from Reasoner; For Your Reference Only):\nCount the rows: 3.\n" in text
    assert text.endswith("<hint>\n[Your concise hint — 1 to 3 sentences maximum.]\n</hint>\n")
    no_solution = dataclasses.replace(SAMPLE, meta={})
    assert "For Your Reference Only):\n3\n" in hinter_sample(no_solution, "x").messages[0]["content"][1]["text"]
    short = hinter_sample(SAMPLE, "A", "Q={original_question} A={rollout_responses} S={ground_truth_solution} {x}")
    assert short.messages[0]["content"][1]["text"] == "Q=  How many dots?   A=A S=Count the rows: 3. {x}"
    assert HINTER_TEMPLATE.count("{") == 3


def test_settings_defaults_are_hills_and_text_values_parse():
    assert settings_of({}) == HillSettings()
    assert HillSettings().num_hints == 4 and HillSettings().transfer_temperature == 0.3
    s = settings_of({"num_hints": "2", "transfer_temperature": 0.5, "hint_tags": "false", "reward_type": "variance"})
    assert (s.num_hints, s.transfer_temperature, s.hint_tags, s.reward_type) == (2, 0.5, False, "variance")
    assert episode_for("hill").first_role == "reasoner" and episode_for("hill").turn is None


@pytest.mark.parametrize("override, line", [
    ("rollout.episode_args={num_hints: 0}", "rollout.episode_args.num_hints: 0: expected an integer >= 1"),
    ("rollout.episode_args={transfer_temperature: -1}", "rollout.episode_args.transfer_temperature: -1: expected a number > 0"),
    ("rollout.episode_args={reward_type: best}", "rollout.episode_args.reward_type: 'best': expected one of transfer_weighted_non_deg"),
    ("rollout.episode_args={hint_tags: maybe}", "rollout.episode_args.hint_tags: 'maybe': expected true or false"),
    ("rollout.episode_args={hinter_template: 'no question'}", "rollout.episode_args.hinter_template: expected a text with {original_question}"),
    ("rollout.episode_args={hints: 3}", "rollout.episode_args.hints=3: expected text or a number for one of the hill episode's settings: num_hints"),
    ("algo.dynamic_sampling=true", "algo.dynamic_sampling: True: expected off with rollout.episode=hill"),
    ("sample_efficiency.replay.enabled=true", "sample_efficiency.replay.enabled: True: expected off with rollout.episode=hill"),
    ("sample_efficiency.dbb.enabled=true", "sample_efficiency.dbb.enabled: True: expected off with rollout.episode=hill"),
    ("algo.advantage=dbb", "algo.advantage: 'dbb': expected off with rollout.episode=hill"),  # DBB by its name
])
def test_bad_hill_settings_are_one_line_each(override, line, tmp_path):
    errors = config_errors(load_config("configs/hill_tiny.yaml", [override, f"output_dir={tmp_path}"]))
    assert len(errors) == 1 and line in errors[0], errors


def test_hill_is_refused_on_an_engine_without_the_model(tmp_path):
    """Hint reliance re-scores the re-rollouts with the engine's model: vllm has none in-process."""
    errors = config_errors(load_config("configs/hill_tiny.yaml", ["rollout.engine=vllm", f"output_dir={tmp_path}"]))
    assert [e for e in errors if "expected hf with rollout.episode=hill" in e], errors


def test_the_tiny_config_validates(tmp_path):
    assert config_errors(load_config("configs/hill_tiny.yaml", [f"output_dir={tmp_path}"])) == []
