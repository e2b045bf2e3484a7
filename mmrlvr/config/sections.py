"""The config sections a method declares in its own folder, and how the schema reads them.

A method's settings are its folder's (`mmrlvr/methods/<name>/settings.py`, a light dataclass),
registered here under their dotted key ("token_weighting", "sample_efficiency.arrol"). The schema
names such a field by that key alone (`section_field`), and building, defaulting, suggesting and
printing a config read its class from `SECTIONS`, whose plug-in module (`mmrlvr.methods.sections`)
imports every folder's settings, and nothing else, on the first read: the ground floor never
imports a method, and loading a config still loads no torch.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable

from mmrlvr.registry import Registry

SECTIONS: Registry[type] = Registry("config section", plugins="mmrlvr.methods.sections")
"""dotted key -> the section's dataclass (registered by the method folder that owns it)."""


def section(name: str) -> Callable[[], Any]:
    """A default factory: the registered section's defaults, its class read when first called."""

    def defaults() -> Any:
        return SECTIONS.get(name)()

    defaults.__qualname__ = defaults.__name__ = f"section[{name}]"
    return defaults


def section_field(name: str) -> Any:
    """A `Config` field holding the section registered as `name`."""
    return dataclasses.field(default_factory=section(name), metadata={"section": name})


def field_types(cls: type) -> dict[str, Any]:
    """Each field's type: its annotation, or for a section field the registered class."""
    hints = typing.get_type_hints(cls)
    return {f.name: SECTIONS.get(f.metadata["section"]) if "section" in f.metadata else hints[f.name]
            for f in dataclasses.fields(cls)}


def sections_now() -> tuple[tuple[str, type], ...]:
    """The registered sections, for a cache keyed on them (a test may swap one in)."""
    return tuple(SECTIONS.items())
