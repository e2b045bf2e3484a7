"""Self-refinement (ThinkTwice): solve, then refine one's own answer, with the same binary reward.

Our reading of ThinkTwice (no code was available to us; every choice here is ours): RL steps
alternate between two phases on the same policy and the same verifiers.
- solve (even steps): the plain one-turn rollout; the answer is scored, the solver's tokens trained.
- refine (odd steps): the policy solves (that turn becomes context, not trained), is shown
  `REFINE_PROMPT` (a review instruction and the question again, with its answer format), and
  answers again; the refined answer is scored by the same verifier and only
  the refining turn is trained.
GRPO groups are the G episodes of one prompt in either phase. Evaluation runs both turns greedily
and scores the refined answer. Rewards are logged per phase as `reward/solver/mean` and
`reward/refiner/mean`.
"""

from __future__ import annotations

from mmrlvr.rollout.episodes import EpisodeState, Turn, register_episode

REFINE_PROMPT = "Review your answer above; if it is wrong, correct it. {question}"
"""The refine turn's message; `{question}` is the prompt's question again (the last text of its
last user turn), which carries the task's answer format."""


def question_text(sample) -> str:
    """The last text part of the sample's last user message ("" if it has none)."""
    for message in reversed(sample.messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [part.get("text", "") for part in content if isinstance(part, dict) and "text" in part]
        return texts[-1] if texts else ""
    return ""


def phase_of(step: int) -> str:
    """solve on even RL steps (the first is step 1: refine), refine on odd ones."""
    return "solve" if step % 2 == 0 else "refine"


@register_episode("refine", first_role="solver", phase=phase_of)
def refine_turn(state: EpisodeState) -> Turn:
    """After the solve turn: the end (solve phase) or the refine prompt (refine phase, evaluation)."""
    if state.phase == "solve" or len(state.turns) > 1:
        return Turn(end=True, reason="answered")
    text = REFINE_PROMPT.format(question=question_text(state.sample)).strip()
    return Turn({"role": "user", "content": text}, role="refiner", context_only=state.phase != "eval")
