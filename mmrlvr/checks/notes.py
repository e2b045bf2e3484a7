"""Settings that are valid but do not do what they look like they do: one warning line each.

Unlike `validate.CHECKS` these do not stop a run: the run is well defined, only pointless in part.
`mmrlvr.recipe.loop.train` prints each as `mmrlvr: warning: ...` before the model loads. They read
the config as the user wrote it (algo fields left unset are the preset's), not the resolved one.
"""

from __future__ import annotations

from typing import Iterable

from mmrlvr.config.efficiency import uses_dbb
from mmrlvr.config.schema import Config

# verifiers whose score is 0 or 1 (right or wrong); the others give partial credit (iou, tiou,
# boxes, order's Kendall tau)
BINARY_VERIFIERS = frozenset({"choice", "count", "exact", "format", "math", "number"})
STD_NORMALISED = frozenset({"grpo"})  # estimators that divide each group by its std


def _scoring_verifiers(cfg: Config) -> list[str] | None:
    """The verifiers whose scores make up a completion's reward: the one `rewards:` term, else the
    task's own (`VERIFIERS`); None when there are several terms (their sum is not right/wrong)."""
    if cfg.rewards:
        return [cfg.rewards[0].verifier] if len(cfg.rewards) == 1 else None
    from mmrlvr.checks.task_checks import task_module

    try:
        return list(getattr(task_module(cfg.task.name), "VERIFIERS", ()) or ()) or None
    except (ModuleNotFoundError, ImportError):
        return None  # the task check names it


def temporal_contrast_cancels(cfg: Config) -> str | None:
    """T-GRPO/TGPO's bonus is alpha * gate_b on each right answer of prompt b: with one right/wrong
    reward the group's rewards become (1 + alpha gate_b / w) times what they were, and an estimator
    that divides by the group's std removes that factor exactly: the bonus changes nothing."""
    from mmrlvr.checks.validate import _preset_value

    tc = cfg.temporal_contrast
    advantage = _preset_value(cfg, "advantage")
    if not tc.enabled or uses_dbb(cfg) or advantage not in STD_NORMALISED:
        return None
    names = _scoring_verifiers(cfg)
    if not names or not all(n in BINARY_VERIFIERS for n in names):
        return None
    return (f"temporal_contrast.method={tc.method} with algo.advantage={advantage} and a right/wrong reward "
            f"({', '.join(sorted(set(names)))}): the bonus scales each group's rewards by one factor, which "
            f"{advantage}'s division by the group's std removes (up to its 1e-6 eps), so it changes no advantage; set "
            "algo.advantage=dr_grpo (as configs/video_motion_contrast_tiny.yaml does) or turn temporal_contrast off")


def dbb_replaces_advantage(cfg: Config) -> str | None:
    """`sample_efficiency.dbb.enabled: true` makes the estimator dbb (as documented), so an
    algo.advantage the user named besides it is not the one that trains (a preset's is not named)."""
    named = cfg.algo.advantage
    if not cfg.sample_efficiency.dbb.enabled or named is None or named == "dbb":
        return None
    return (f"algo.advantage={named} with sample_efficiency.dbb.enabled=true: the advantages are DBB's (its "
            f"per-prompt baseline replaces {named}, as documented); set algo.advantage=dbb (the same as the "
            f"enabled switch) or sample_efficiency.dbb.enabled=false to train with {named}")


def old_bad_row_names(cfg: Config) -> str | None:
    """The deprecation line of `task.max_bad_media_frac` / `task.args.max_bad_frac` (both still set
    the one bad-row limit, `mmrlvr.data.bad_rows`)."""
    from mmrlvr.data.bad_rows import max_bad_frac_setting

    return "; ".join(max_bad_frac_setting(cfg.task)[1]) or None


NOTES = (temporal_contrast_cancels, dbb_replaces_advantage, old_bad_row_names)


def config_warnings(cfg: Config) -> Iterable[str]:
    """Every warning line for `cfg` (empty when there is none)."""
    return [line for note in NOTES if (line := note(cfg))]
