"""PRCO's prompts as the authors' inference builds them (one user turn, images first, their templates
rendered as their Jinja environment renders them) and evaluation as their inference: caption, then answer."""

from __future__ import annotations

import pytest
from PIL import Image

from mmrlvr.config import load_config
from mmrlvr.methods.prco.episode import (OBSERVER_TEMPLATE, SOLVER_TEMPLATE, PrcoOptions, observer_sample, options,
                                         render, solver_sample)
from mmrlvr.rollout.episodes import episode_prompts, run_episodes
from mmrlvr.rollout.hf import HFRolloutEngine
from mmrlvr.tasks import load_task
from mmrlvr.types import Sample
from mmrlvr.checks.validate import config_errors


def _sample():
    img = Image.new("RGB", (56, 56), (200, 30, 30))
    return Sample("s", ({"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  How many? "},
                                                     {"type": "text", "text": "Answer as <answer>N</answer>."}]}),
                  reference=2, images=(img,), target="<answer>2</answer>")


def test_templates_render_as_their_jinja_and_replace():
    jinja2 = pytest.importorskip("jinja2.sandbox")
    env = jinja2.SandboxedEnvironment()
    q, cap = "  How many red shapes?\n", "- two red circles, top left"
    # observer_solver.py:366-377: render(content=question), then the first "<caption>" replaced
    assert render(OBSERVER_TEMPLATE, q) == env.from_string(OBSERVER_TEMPLATE).render(content=q)
    assert render(SOLVER_TEMPLATE, q, cap) == env.from_string(SOLVER_TEMPLATE).render(content=q).replace("<caption>", cap, 1)
    assert "### The detailed caption of the provided image: - two red circles, top left\n### Question: How many red shapes?\n\n" \
        in render(SOLVER_TEMPLATE, q, cap)
    assert render("C: {caption} Q: {question}", q, cap) == "C: - two red circles, top left Q: How many red shapes?"
    assert "question\u2019s target(s)" in OBSERVER_TEMPLATE and not OBSERVER_TEMPLATE.endswith("\n")


def test_each_role_sees_one_user_turn_images_first_no_system_prompt():
    s = _sample()
    obs = observer_sample(s, {})
    (msg,) = obs.messages
    assert msg["role"] == "user" and msg["content"][0] == {"type": "image"} and len(msg["content"]) == 2
    # the question: the text parts joined by a newline (their wrapper's '\n'.join), trimmed by the template
    assert "Question: How many? \nAnswer as <answer>N</answer>.\n\nCaption guidelines:" in msg["content"][1]["text"]
    assert obs.images == s.images and obs.reference == 2 and obs.id == "s" and obs.target is None
    sol = solver_sample(obs, "  - two red squares \n", PrcoOptions())  # the Observer's sample still knows the question
    text = sol.messages[0]["content"][-1]["text"]
    assert "image: - two red squares\n### Question: How many? \nAnswer as" in text
    blind = solver_sample(obs, "x", PrcoOptions(), image=False)
    assert blind.images == () and blind.messages[0]["content"] == [{"type": "text", "text": blind.messages[0]["content"][0]["text"]}]


def test_episode_args_are_checked_before_anything_runs(tmp_path):
    base = ["configs/prco_tiny.yaml", [f"output_dir={tmp_path}"]]
    assert config_errors(load_config(*base)) == []
    bad = {"rollout.episode_args.solver_answers=0": "rollout.episode_args.solver_answers=0: expected an integer >= 1",
           "rollout.episode_args.leak_gate=strict": "expected one of: verifier+string, verifier, none",
           "rollout.episode_args.solver_template='Q: {question}'": "expected a template with {caption} and {question}",
           "rollout.episode_args.hint=x": "expected text or a number for one of the prco episode's settings"}
    for override, why in bad.items():
        errors = config_errors(load_config(base[0], [*base[1], override]))
        assert any(why in e for e in errors), (override, errors)
    with pytest.raises(ValueError, match="rollout.episode_args.leak_reward='high': expected a number"):
        options({"leak_reward": "high"})


def test_evaluation_is_a_greedy_caption_then_a_greedy_answer(tiny):
    model, processor = tiny
    engine = HFRolloutEngine(model, processor)
    cfg = load_config("configs/prco_tiny.yaml", ["rollout.max_new_tokens=5"])
    prompts = load_task("counting", "eval", 3, 0)
    out = run_episodes(engine, prompts, 1, cfg.rollout, seed=0, greedy=True)
    observers = episode_prompts(cfg.rollout, prompts)
    seen = engine.rollout(observers, 1, cfg.rollout, seed=0, greedy=True)
    opts = options(cfg.rollout.episode_args)
    want = engine.rollout([solver_sample(o, c.text, opts) for o, c in zip(observers, seen.completions)], 1,
                          cfg.rollout, seed=1, greedy=True)
    assert [c.text for c in out.completions] == [c.text for c in want.completions]
    assert [c.sample_index for c in out.completions] == [0, 1, 2]


def test_prco_is_refused_on_an_engine_other_than_hf(tmp_path):
    """The Solver's prompts are built between two in-process hf rollouts: vllm is refused up front."""
    errors = config_errors(load_config("configs/prco_tiny.yaml", ["rollout.engine=vllm", f"output_dir={tmp_path}"]))
    assert [e for e in errors if "expected hf with rollout.episode=prco" in e], errors
