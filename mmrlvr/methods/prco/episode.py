"""PRCO (Perception-Reasoning Coevolution): one policy, two roles, each with its own reward.

The Observer writes a caption of the image for the question; the Solver answers from the image
and that caption. What is the authors' (Dtc7w3PQ/PRCO at 69d094b, `VLMEvalKit/`, inference only):
both templates, verbatim (`vlmeval/format_prompt/Observer.jinja`, `Solver.jinja`); the caption is
the Observer's whole output, stripped (`vlmeval/vlm/qwen2_vl/observer_solver.py:410`); each role
sees one user turn, images first, then one text (`:403-413`), no system prompt; the question is the
prompt's text parts joined by newlines (`:364`); both roles are the same weights.

Their training code is not public. OUR READING, per RL step (`rollout.episode: prco`):
- the G rows of a prompt are G Observer captions (`rollout.group_size`), sampled from the
  Observer prompt (`observer_sample`, applied to the round's prompts before the rollout);
- `mmrlvr.methods.prco.solve.solve_captions` (a collect strategy) gives each caption to the Solver, K answers each
  (`episode_args.solver_answers`), scored by the run's verifiers: the Solver's reward;
- the Observer's reward is its caption's utility, the mean reward of its K answers, gated by
  `mmrlvr.methods.prco.maths` (a caption that leaks the answer gets `leak_reward`, 0 by default);
- advantages: the G captions of a prompt are one group; the K answers of one caption are another
  (so an answer is compared with answers from the same evidence, and a poor caption is charged
  to the Observer, not the Solver); answers to a leaked caption are not trained (reward NaN);
- one update over both roles' rows; evaluation: one caption, then one answer, both greedy.
The Solver sees the image from step `solver_image_after` on (0: always, as their inference).
Logged: `reward/observer/...`, `reward/solver/...`.
"""

from __future__ import annotations

import dataclasses

from mmrlvr.methods.prco.maths import LEAK_GATES
from mmrlvr.rollout.episode_registry import register_episode
from mmrlvr.types import Sample

OBSERVER_TEMPLATE = (
    "You are the Observer.\n\n"
    "You are given an image and a relevant question. Your task is to write a caption that extracts only the "
    "visually grounded details needed to answer the question later.\n\n"
    "Question: {{ content | trim }}\n\n"
    "Caption guidelines:\n"
    "- Focus on the question\u2019s target(s): describe relevant objects/regions/values with attributes and spatial "
    "relations (left/right/top/bottom, near/far, inside/overlapping), including counts and comparisons when relevant.\n"
    "- Include all visually grounded details necessary and sufficient to answer the question later. You may omit "
    "visual clutter unrelated to the question.\n"
    "- Write the caption with enough visual evidence that a later LLM can answer Question as if it had seen the "
    "image (using only the caption + the question).\n"
    "- Don\u2019t provide the final answer. Only describe what is directly observable in the image, and avoid any "
    "additional reasoning or calculations.\n"
    "- Write a thorough caption that preserves enough visual details to reconstruct the scene later; avoid overly "
    "short summaries.\n"
    "- When the answer depends on specific labels, numbers, or option mappings, transcribe them explicitly rather "
    "than summarizing.\n\n"
    "Please format the caption as a Markdown bullet list rather than a paragraph."
)
"""`Observer.jinja`, verbatim (typographic apostrophes, no trailing newline)."""

SOLVER_TEMPLATE = (
    "Use the caption as the PRIMARY and DEFAULT input and solve directly from it.\n\n"
    "Only check the image when the caption does not provide enough information to complete the task.\n\n"
    "### The detailed caption of the provided image: <caption>\n"
    "### Question: {{ content | trim }}\n\n"
    "Now perform your reasoning inside <think>...</think>, then output the final answer in \\boxed{}."
)
"""`Solver.jinja`, verbatim; `<caption>` is replaced after rendering (observer_solver.py:372-377)."""

ARGS = ("solver_answers", "solver_image_after", "leak_gate", "leak_reward", "observer_template", "solver_template")
QUESTION_KEY = "prco_question"  # the original question, kept in an Observer sample's meta for its Solver


@dataclasses.dataclass(frozen=True)
class PrcoOptions:
    """`rollout.episode_args` of `prco`, parsed (text or numbers)."""

    solver_answers: int = 2  # K: Solver answers per caption
    solver_image_after: int = 0  # the first RL step whose Solver sees the image (evaluation always does)
    leak_gate: str = "verifier+string"
    leak_reward: float = 0.0  # the Observer's reward for a leaking caption
    observer_template: str = OBSERVER_TEMPLATE
    solver_template: str = SOLVER_TEMPLATE


def check_args(args: dict) -> list[tuple[str, object, str]]:
    """(key, value as given, why) for each unusable setting."""
    given = {k: v for k, v in (args or {}).items() if v is not None}
    a = {k: str(v) for k, v in given.items()}
    out = []
    for key, low in (("solver_answers", 1), ("solver_image_after", 0)):
        if key in a and not (a[key].strip().isdigit() and int(a[key]) >= low):
            out.append((key, given[key], f"expected an integer >= {low}"))
    if a.get("leak_gate", LEAK_GATES[0]) not in LEAK_GATES:
        out.append(("leak_gate", given["leak_gate"], f"expected one of: {', '.join(LEAK_GATES)}"))
    if "leak_reward" in a:
        try:
            float(a["leak_reward"])
        except ValueError:
            out.append(("leak_reward", given["leak_reward"], "expected a number"))
    if "observer_template" in a and "{question}" not in a["observer_template"]:
        out.append(("observer_template", given["observer_template"], "expected a template with {question}"))
    if "solver_template" in a and not all(p in a["solver_template"] for p in ("{question}", "{caption}")):
        out.append(("solver_template", given["solver_template"], "expected a template with {caption} and {question}"))
    return out


def config_problems(cfg) -> list[str]:
    """One validation line per unusable prco setting (`Episode.check`), and the engine it needs."""
    out = [f"rollout.episode_args.{key}={value!r}: {why}" for key, value, why in check_args(cfg.rollout.episode_args or {})]
    if cfg.rollout.engine != "hf":
        out.append(f"rollout.engine={cfg.rollout.engine!r}: expected hf with rollout.episode=prco (the Solver's "
                   "prompts are built from the Observer's captions between two hf rollouts)")
    return out


def options(args: dict | None) -> PrcoOptions:
    problems = check_args(args or {})
    if problems:
        key, value, why = problems[0]
        raise ValueError(f"rollout.episode_args.{key}={value!r}: {why}")
    a = {k: str(v) for k, v in (args or {}).items() if v is not None}
    return PrcoOptions(int(a.get("solver_answers", 2)), int(a.get("solver_image_after", 0)),
                       a.get("leak_gate", LEAK_GATES[0]), float(a.get("leak_reward", 0.0)),
                       a.get("observer_template", OBSERVER_TEMPLATE), a.get("solver_template", SOLVER_TEMPLATE))


def question_of(sample: Sample) -> str:
    """The text parts of the last user message, joined by newlines (as their wrapper joins them)."""
    if QUESTION_KEY in sample.meta:
        return sample.meta[QUESTION_KEY]
    for message in reversed(sample.messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return ""


def render(template: str, question: str, caption: str | None = None) -> str:
    """Jinja's `{{ content | trim }}` (or our `{question}`) -> the question, stripped; then the first
    `<caption>` (or `{caption}`) -> the caption."""
    text = template.replace("{{ content | trim }}", question.strip()).replace("{question}", question.strip())
    if caption is not None:
        text = text.replace("<caption>" if "<caption>" in text else "{caption}", caption, 1)
    return text


def role_sample(sample: Sample, text: str, media: bool = True) -> Sample:
    """One user turn: the sample's images (and videos) first, then `text`; no system prompt."""
    parts = [{"type": "image"} for _ in sample.images] + [{"type": "video"} for _ in sample.videos] if media else []
    return dataclasses.replace(sample, messages=({"role": "user", "content": [*parts, {"type": "text", "text": text}]},),
                               images=sample.images if media else (), videos=sample.videos if media else (),
                               meta={**sample.meta, QUESTION_KEY: question_of(sample)}, target=None)


def observer_sample(sample: Sample, args: dict | PrcoOptions) -> Sample:
    opts = args if isinstance(args, PrcoOptions) else options(args)
    return role_sample(sample, render(opts.observer_template, question_of(sample)))


def solver_sample(sample: Sample, caption: str, opts: PrcoOptions, image: bool = True) -> Sample:
    return role_sample(sample, render(opts.solver_template, question_of(sample), caption.strip()), media=image)


def evaluate(engine, prompts: list[Sample], k: int, rollout_cfg, seed: int, **kw):
    """Evaluation as their inference: a caption per prompt, then the Solver's answer (with the image)."""
    opts = options(getattr(rollout_cfg, "episode_args", None))
    observers = [observer_sample(p, opts) for p in prompts]
    seen = engine.rollout(observers, k, rollout_cfg, seed=seed, **kw)
    solvers = [solver_sample(observers[c.sample_index], c.text, opts) for c in seen.completions]
    out = engine.rollout(solvers, 1, rollout_cfg, seed=seed + 1, **kw)
    for c, obs in zip(out.completions, seen.completions):
        c.sample_index = obs.sample_index
    return out


register_episode("prco", first_role="observer", args=ARGS, prompt=observer_sample, evaluate=evaluate,
                 check=config_problems)(None)
