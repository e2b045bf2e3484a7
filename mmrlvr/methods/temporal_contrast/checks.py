"""Temporal contrast's checks of `temporal_contrast.*`, one line each, before anything heavy runs, and
its warning where a valid setting gives no bonus."""

from __future__ import annotations

from mmrlvr.checks.rules import Rule, _num, at_least, one_of
from mmrlvr.checks.task_checks import task_module
from mmrlvr.checks.validate import preset_value
from mmrlvr.config.efficiency import uses_dbb

# verifiers whose score is 0 or 1 (right or wrong); the others give partial credit (iou, tiou,
# boxes, order's Kendall tau)
BINARY_VERIFIERS = frozenset({"choice", "count", "exact", "format", "math", "number"})
STD_NORMALISED = frozenset({"grpo"})  # estimators that divide each group by its std


def _scoring_verifiers(cfg) -> list[str] | None:
    """The verifiers whose scores make up a completion's reward: the one `rewards:` term, else the
    task's own (`VERIFIERS`); None when there are several terms (their sum is not right/wrong)."""
    if cfg.rewards:
        return [cfg.rewards[0].verifier] if len(cfg.rewards) == 1 else None
    try:
        return list(getattr(task_module(cfg.task.name), "VERIFIERS", ()) or ()) or None
    except (ModuleNotFoundError, ImportError):
        return None  # the task check names it


RULES: tuple[Rule, ...] = (
    Rule("temporal_contrast.method", one_of("tgrpo", "tgpo"), "tgrpo or tgpo"),
    Rule("temporal_contrast.alpha", at_least(0), "a finite number >= 0"),
    Rule("temporal_contrast.mu", at_least(0), "a finite number >= 0"),
    Rule("temporal_contrast.shuffled_samples", at_least(1), "an integer >= 1 (or null: group_size // 2)"),
    Rule("temporal_contrast.correct_threshold", lambda v: _num(v) and 0 <= v < 1,
         "a number in [0, 1) (an answer score above it counts as correct)"),
)


def warn(cfg) -> str | None:
    """T-GRPO/TGPO's bonus is alpha * gate_b on each right answer of prompt b: with one right/wrong
    reward the group's rewards become (1 + alpha gate_b / w) times what they were, and an estimator
    that divides by the group's std removes that factor exactly: the bonus changes nothing."""
    tc = cfg.temporal_contrast
    advantage = preset_value(cfg, "advantage")
    if not tc.enabled or uses_dbb(cfg) or advantage not in STD_NORMALISED:
        return None
    names = _scoring_verifiers(cfg)
    if not names or not all(n in BINARY_VERIFIERS for n in names):
        return None
    return (f"temporal_contrast.method={tc.method} with algo.advantage={advantage} and a right/wrong reward "
            f"({', '.join(sorted(set(names)))}): the bonus scales each group's rewards by one factor, which "
            f"{advantage}'s division by the group's std removes (up to its 1e-6 eps), so it changes no advantage; set "
            "algo.advantage=dr_grpo (as configs/video_motion_contrast_tiny.yaml does) or turn temporal_contrast off")
