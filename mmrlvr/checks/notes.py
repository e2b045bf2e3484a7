"""Settings that are valid but do not do what they look like they do: one warning line each.

Unlike `validate.CHECKS` these do not stop a run: the run is well defined, only pointless in part.
`mmrlvr.recipe.loop.train` prints each as `mmrlvr: warning: ...` before the model loads. They read
the config as the user wrote it (algo fields left unset are the preset's), not the resolved one.
"""

from __future__ import annotations

from typing import Iterable

from mmrlvr.config.schema import Config


def old_bad_row_names(cfg: Config) -> str | None:
    """The deprecation line of `task.max_bad_media_frac` / `task.args.max_bad_frac` (both still set
    the one bad-row limit, `mmrlvr.data.bad_rows`)."""
    from mmrlvr.data.bad_rows import max_bad_frac_setting

    return "; ".join(max_bad_frac_setting(cfg.task)[1]) or None


NOTES = (old_bad_row_names,)


def config_warnings(cfg: Config) -> Iterable[str]:
    """Every warning line for `cfg` (empty when there is none): the ones above, then each method's own
    (its folder's `warn`, through `METHOD_SETTINGS`), in the order the methods are registered."""
    from mmrlvr.checks.rules import METHOD_SETTINGS

    warns = [METHOD_SETTINGS.get(name).warn for name in METHOD_SETTINGS.in_order()]
    return [line for note in (*NOTES, *filter(None, warns)) if (line := note(cfg))]
