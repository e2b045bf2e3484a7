"""HiLL (Learning to Hint for RL): the `hill` episode, its settings and the prompts it builds.

As the authors' released trainer runs it (Andree-9/HiLL at 195d94e; "HT" is
`verl/trainer/ppo/hill_ray_trainer.py`, "HU" `verl/trainer/ppo/hinter_utils.py`): the reasoner
answers each prompt G times (a plain one-turn rollout, which is what this episode's rollout is);
for every group with no correct answer the hinter writes `num_hints` hints from the question, one
of the group's failed answers drawn at random and the reference solution (`HINTER_TEMPLATE`,
HU:135-165); each hint that passes the gates is appended to the question (`hinted_sample`,
HU:204-214) and the reasoner answers that G times. The step itself (gates, reliance, rewards,
which rows are trained) is `mmrlvr.methods.hill.hints`; the math `mmrlvr.methods.hill.maths`.

Ours: the hinter is the policy itself (HiLL trains a second model), shown the prompt's images as
well; it samples with the rollout's settings (HiLL's hinter: temperature 0.7, top-k 20, top-p 0.8).
Evaluation answers without hints, as HiLL's validation does.
"""

from __future__ import annotations

import dataclasses

from mmrlvr.config.efficiency import uses_dbb
from mmrlvr.methods.hill.maths import REWARD_TYPES
from mmrlvr.methods.refine.episode import question_text
from mmrlvr.rollout.episode_registry import EPISODES, Episode
from mmrlvr.types import Sample

HINTER_TEMPLATE = """You are a Pedagogical Hint Generator for a Mathematical Reasoner.
TASK: GENERATE A MINIMAL HINT

OBJECTIVE
The Reasoner failed the Original Question. Your goal is to generate a minimal but useful hint that helps the Reasoner find the correct logical path.
CRITICAL: Provide a strategic nudge, not a solution. The Reasoner must still perform the deduction themselves.

INPUTS
1) Original Question:
{original_question}

2) Reasoner's Failed Attempt:
{rollout_responses}

3) Ground Truth Solution (Hidden from Reasoner; For Your Reference Only):
{ground_truth_solution}

GUIDELINES
1. Analyze the failure to identify the missing insight or misconception.
2. Provide a conceptual pointer (e.g., a relevant theorem, a structural property, an alternative representation, or an intermediate goal).
3. Do not reveal the final answer or any specific numerical values, formulas with substituted numbers, or computed intermediate steps.

OUTPUT FORMAT (Follow strictly)
<analysis>
[Briefly identify the logic breakdown and the necessary insight.]
</analysis>

<hint>
[Your concise hint — 1 to 3 sentences maximum.]
</hint>
"""
"""The hinter's prompt, verbatim (HU:135-165), sent as one user message without a system turn (HT:291)."""

SETTINGS = ("num_hints", "transfer_temperature", "reward_type", "min_hard_prompts", "hinter_max_new_tokens",
            "max_hinted_prompt_tokens", "hinter_template", "hint_tags")


@dataclasses.dataclass(frozen=True)
class HillSettings:
    """`rollout.episode_args` of the hill episode, with HiLL's values (`scripts/run_hill.sh`) as defaults."""

    num_hints: int = 4  # M hints per all-incorrect prompt (run_hill.sh:41)
    transfer_temperature: float = 0.3  # T of the transfer weight exp(min(reliance, 0) / T) (run_hill.sh:44)
    reward_type: str = "transfer_weighted_non_deg"  # run_hill.sh:43
    min_hard_prompts: int = 1  # fewer all-incorrect prompts in a round: no hints (run_hill.sh:42)
    hinter_max_new_tokens: int | None = None  # None: rollout.max_new_tokens (HiLL: 1024, run_hill.sh:47)
    max_hinted_prompt_tokens: int = 2048  # the overlong gate (HiLL: data.max_prompt_length, run_hill.sh:61)
    hinter_template: str = HINTER_TEMPLATE  # placeholders {original_question} {rollout_responses} {ground_truth_solution}
    hint_tags: bool = True  # the hint is the <hint>...</hint> block (HiLL); false: the whole response (ours, tiny runs)


def _as_bool(value) -> bool | None:
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(str(value).strip().lower())


def settings_of(args: dict | None) -> HillSettings:
    """`rollout.episode_args` -> HillSettings (validated before: `settings_problems`)."""
    args = {k: v for k, v in (args or {}).items() if v is not None}
    kw: dict = {}
    for key in ("num_hints", "min_hard_prompts", "hinter_max_new_tokens", "max_hinted_prompt_tokens"):
        if key in args:
            kw[key] = int(args[key])
    if "transfer_temperature" in args:
        kw["transfer_temperature"] = float(args["transfer_temperature"])
    for key in ("reward_type", "hinter_template"):
        if key in args:
            kw[key] = str(args[key])
    if "hint_tags" in args:
        kw["hint_tags"] = _as_bool(args["hint_tags"])
    return HillSettings(**kw)


def settings_problems(cfg) -> list[str]:
    """One line per bad hill setting (rollout.episode_args.*) or setting it cannot be combined with."""
    args = dict(cfg.rollout.episode_args or {})
    out = []

    def positive_int(key):
        v = args.get(key)
        if v is not None and not (str(v).strip().isdigit() and int(v) >= 1 and not isinstance(v, bool)):
            out.append(f"rollout.episode_args.{key}: {v!r}: expected an integer >= 1")
    for key in ("num_hints", "min_hard_prompts", "hinter_max_new_tokens", "max_hinted_prompt_tokens"):
        positive_int(key)
    t = args.get("transfer_temperature")
    try:
        ok = t is None or (not isinstance(t, bool) and float(t) > 0)
    except ValueError:
        ok = False
    if not ok:
        out.append(f"rollout.episode_args.transfer_temperature: {t!r}: expected a number > 0")
    if args.get("reward_type") is not None and args["reward_type"] not in REWARD_TYPES:
        out.append(f"rollout.episode_args.reward_type: {args['reward_type']!r}: expected one of {', '.join(REWARD_TYPES)}")
    if args.get("hint_tags") is not None and _as_bool(args["hint_tags"]) is None:
        out.append(f"rollout.episode_args.hint_tags: {args['hint_tags']!r}: expected true or false")
    if args.get("hinter_template") is not None and "{original_question}" not in str(args["hinter_template"]):
        out.append("rollout.episode_args.hinter_template: expected a text with {original_question} in it")
    why = "HiLL replaces all-incorrect groups by hinted ones and trains every other group"
    dbb_on = uses_dbb(cfg)  # named by the switch the config used: the enabled one, else algo.advantage=dbb
    dbb = (("algo.advantage", cfg.algo.advantage) if dbb_on and not cfg.sample_efficiency.dbb.enabled
           else ("sample_efficiency.dbb.enabled", cfg.sample_efficiency.dbb.enabled))
    for key, value, bad in (("algo.dynamic_sampling", cfg.algo.dynamic_sampling, bool(cfg.algo.dynamic_sampling)),
                            ("sample_efficiency.replay.enabled", cfg.sample_efficiency.replay.enabled,
                             bool(cfg.sample_efficiency.replay.enabled)),
                            (*dbb, dbb_on),
                            ("rollout.async_steps", cfg.rollout.async_steps, bool(cfg.rollout.async_steps))):
        if bad:
            out.append(f"{key}: {value!r}: expected off with rollout.episode=hill ({why}; not combined yet)")
    if cfg.rollout.engine != "hf":
        out.append(f"rollout.engine: {cfg.rollout.engine!r}: expected hf with rollout.episode=hill (hint reliance "
                   "scores the re-rollouts with the engine's own model)")
    return out


def solution_of(sample: Sample) -> str:
    """The reference solution shown to the hinter: `meta["solution"]` where the task has one (HiLL's
    `solution` field, HT:265), else the reference answer itself (ours: most tasks have no worked solution)."""
    solution = sample.meta.get("solution") if isinstance(sample.meta, dict) else None
    return str(solution if solution is not None else sample.reference)


def gold_answer(sample: Sample) -> str:
    """The answer the leak gate looks for (HiLL: the dataset's `answer`, HT:266): `meta["answer"]`, else the reference."""
    answer = sample.meta.get("answer") if isinstance(sample.meta, dict) else None
    return str(answer if answer is not None else sample.reference)


def _media_parts(sample: Sample) -> list[dict]:
    """The image/video placeholders of every message, in order (the order of sample.images/videos)."""
    parts = []
    for message in sample.messages:
        content = message.get("content")
        if isinstance(content, list):
            parts += [dict(p) for p in content if isinstance(p, dict) and p.get("type") in ("image", "video")]
    return parts


def hinter_sample(sample: Sample, attempt: str, template: str = HINTER_TEMPLATE) -> Sample:
    """The hinter's prompt for a failed group: one user message, the prompt's media first (ours: HiLL
    is text-only), then the template with the question, the failed answer and the solution (HU:167-198)."""
    text = (template.replace("{original_question}", question_text(sample))
            .replace("{rollout_responses}", attempt).replace("{ground_truth_solution}", solution_of(sample)))
    media = _media_parts(sample)
    content = [*media, {"type": "text", "text": text}] if media else text
    return dataclasses.replace(sample, id=f"{sample.id}#hinter", messages=({"role": "user", "content": content},),
                               target=None)


def hinted_sample(sample: Sample, hint: str, m: int) -> Sample:
    """The prompt with the hint appended to its question after one blank line, no prefix (HU:204-214);
    the system turn, images and reference stay. `m` numbers the hint in the id."""
    question = question_text(sample)
    text = f"{question.strip()}\n\n{hint.strip()}"
    messages = list(sample.messages)
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "user":
            continue
        content = messages[i].get("content")
        if isinstance(content, str):
            messages[i] = {**messages[i], "content": text}
        else:
            last = max((j for j, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "text"), default=None)
            parts = [dict(p) for p in content]
            if last is None:
                parts.append({"type": "text", "text": text})
            else:
                parts[last] = {**parts[last], "text": text}
            messages[i] = {**messages[i], "content": parts}
        break
    return dataclasses.replace(sample, id=f"{sample.id}#hint{m}", messages=tuple(messages))


EPISODES.register("hill")(Episode(None, first_role="reasoner", args=SETTINGS, check=settings_problems))
