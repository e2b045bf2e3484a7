"""Self-refinement (ThinkTwice): solve, then refine one's own answer, with the same binary reward.

As ThinkTwice's released trainer (CSSLab/ThinkTwice at 52ef7e8, `verl/verl/trainer/ppo/ray_trainer.py`,
"TT" below) runs it, RL steps alternate between two phases on one policy and one reward:
- solve (odd steps, the first is step 1): the plain one-turn rollout, G answers per prompt, all trained.
- refine (even steps): one answer per prompt, then G refinements of it: the conversation is the
  prompt, the policy's own answer, and `REFINE_PROMPT` (TT:69-75, verbatim) as a new user turn
  (TT:823-827); the answer and the instruction are context (loss mask 0) and only the refining
  turn is trained. The G refinements of one answer are a group (TT:2842-2857), scored by the same
  verifier (the reward only renames its log key there: `math_dataset.py:21-51`).

Our difference: their refine step takes the answer from the *previous solve step's* rollouts of the
same prompts (one per prompt, drawn uniformly: `reflection_utils.py:200-241`); ours samples that
answer afresh from the current policy (the one their solve update produced) for the refine step's
own prompts, so no rollouts are carried between steps. Their advantages are mean-centred only
(`norm_adv_by_std_in_grpo=False`): `configs/refine_tiny.yaml` sets `algo.advantage: dr_grpo`.
Evaluation runs both turns greedily and scores the refined answer. Rewards are logged per phase as
`reward/solver/mean` and `reward/refiner/mean`.
"""

from __future__ import annotations

from mmrlvr.rollout.episode_registry import EpisodeState, Turn, register_episode

REFINE_PROMPT = (
    "Follow this instruction, carefully review your previous solution:\n"
    "1. Go through each calculation step-by-step. Check if there are any errors in calculations, logic, or "
    "problem understanding.\n"
    "2. If you find any mistakes, explicitly point out what was wrong and explain the correct approach.\n"
    "3. If the solution is already correct, verify each step and explain it more clearly.\n"
    "4. Finally, after finishing the review, provide your refined solution and answer.\n"
)
"""The refine turn's message: ThinkTwice's review instruction, verbatim (TT:69-75). Their trainer
takes another from its config (`algorithm.reflection.instruction`, TT:396-399); ours from
`rollout.episode_args.instruction`."""


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


def instruction(state: EpisodeState) -> str:
    """The review message: rollout.episode_args.instruction with `{question}` filled in, else REFINE_PROMPT."""
    own = state.args.get("instruction")
    if not own:
        return REFINE_PROMPT
    return str(own).replace("{question}", question_text(state.sample)).strip()


def phase_of(step: int) -> str:
    """solve on odd RL steps (step 1 first, as ThinkTwice solves before it refines), refine on even ones."""
    return "solve" if step % 2 == 1 else "refine"


@register_episode("refine", first_role="solver", phase=phase_of, shared_first=("refine",), args=("instruction",))
def refine_turn(state: EpisodeState) -> Turn:
    """After the solve turn: the end (solve phase) or the review instruction (refine phase, evaluation)."""
    if state.phase == "solve" or len(state.turns) > 1:
        return Turn(end=True, reason="answered")
    return Turn({"role": "user", "content": instruction(state)}, role="refiner", context_only=state.phase != "eval")
