"""The registry: duplicates refused, unknown names listed, and a plug-in package imported by name on
first read (how a method folder fills a table of a lower layer that never imports it)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from mmrlvr.registry import Registry


def test_duplicate_names_are_refused_and_unknown_ones_list_what_is_known():
    reg: Registry = Registry("thing")
    reg.register("b")(len)
    reg.register("a")(abs)
    reg.register("a")(abs)  # the same object again is not a clash (a module imported twice)
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        reg.register("a")(len)
    with pytest.raises(KeyError, match="unknown thing 'c'; known: a, b"):
        reg.get("c")
    assert reg.names() == ["a", "b"] and reg.in_order() == ["b", "a"]


@pytest.fixture
def plugin_package(tmp_path, monkeypatch):
    """A package `fake_plugins` on sys.path whose import registers `late` into `fake_plugins_table.REG`."""
    (tmp_path / "fake_plugins_table.py").write_text(textwrap.dedent("""
        from mmrlvr.registry import Registry
        REG = Registry("widget", plugins="fake_plugins")
        REG.register("early")(len)
    """))
    (tmp_path / "fake_plugins").mkdir()
    (tmp_path / "fake_plugins" / "__init__.py").write_text(textwrap.dedent("""
        from fake_plugins_table import REG
        IMPORTS = globals().get("IMPORTS", 0) + 1
        REG.register("late")(abs)
        assert "early" in REG  # reading the table while it loads does not import it again
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("fake_plugins", "fake_plugins_table"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("read", ["get", "contains", "names", "in_order", "items"])
def test_every_read_imports_the_plugin_package_first_and_only_once(plugin_package, read):
    import fake_plugins_table

    assert "fake_plugins" not in sys.modules  # nothing imported by defining the table
    reg = fake_plugins_table.REG
    first = {"get": lambda: reg.get("late"), "contains": lambda: "late" in reg, "names": reg.names,
             "in_order": reg.in_order, "items": lambda: dict(reg.items())}[read]()
    assert first in (abs, True, ["early", "late"], {"early": len, "late": abs})
    assert reg.in_order() == ["early", "late"] and sys.modules["fake_plugins"].IMPORTS == 1


def test_a_plugin_package_that_fails_to_import_fails_every_read_not_just_the_first(tmp_path, monkeypatch):
    (tmp_path / "broken_plugins").mkdir()
    (tmp_path / "broken_plugins" / "__init__.py").write_text("raise RuntimeError('broken plug-in')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry = Registry("gadget", plugins="broken_plugins")
    for _ in range(2):  # never a silently half-filled table on the second read
        with pytest.raises(RuntimeError, match="broken plug-in"):
            reg.names()


def test_a_snapshot_loads_the_plugins_before_it_copies_so_swapping_it_in_loses_nothing(plugin_package, monkeypatch):
    """The copy a test swaps in holds the plug-ins' names, and the real table keeps them after the swap is undone."""
    import fake_plugins_table

    reg = fake_plugins_table.REG
    with monkeypatch.context() as patch:
        patch.setattr(reg, "_items", reg.snapshot())
        reg.register("throwaway")(print)
        assert reg.in_order() == ["early", "late", "throwaway"]
    assert reg.in_order() == ["early", "late"] and sys.modules["fake_plugins"].IMPORTS == 1
