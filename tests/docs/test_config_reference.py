"""The config reference lists every key `mmrlvr config --show` prints, with the same default."""

from __future__ import annotations

import re

import pytest

from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.checks.reference import describe_config
from mmrlvr.tasks._catalogue import task_names

from .conftest import page

LINE = re.compile(r"^( *)([A-Za-z_][A-Za-z0-9_]*):(?: (.*?))?(?: +# .*)?$")


def shown_keys(text: str) -> dict[str, str]:
    """Dotted key -> printed value of every line of `config --show` output (sections included,
    with an empty value): the indentation gives the nesting."""
    keys, stack = {}, []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, f"unexpected config --show line: {line!r}"
        depth = len(m.group(1)) // 2
        stack[depth:] = [m.group(2)]
        keys[".".join(stack)] = (m.group(3) or "").strip()
    return keys


def test_shown_keys_parses_nesting():
    text = "seed: 0  # doc\nmodel:\n  path: tiny  # a: b\n  lora: 0  # x\ntask:\n  args:  # doc\n    max_red: 5  # default\n"
    # hand-read: 2 top keys with values, 2 sections, 3 nested keys
    assert shown_keys(text) == {"seed": "0", "model": "", "model.path": "tiny", "model.lora": "0",
                                "task": "", "task.args": "", "task.args.max_red": "5"}


def test_every_key_of_config_show_is_in_the_reference(capsys, gen_reference):
    assert main(["config", "--show"]) == 0
    keys = shown_keys(capsys.readouterr().out)
    assert len(keys) > 100 and "algo.clip_low" in keys and "task.args.flaw_prob" in keys
    text = page(gen_reference, "reference/config.md")
    missing = [k for k in keys if f"`{k}`" not in text and f"## {k}" not in text]
    assert not missing, f"config keys `mmrlvr config --show` lists but docs/reference/config.md does not: {missing}"


def test_reference_defaults_equal_config_show(capsys, gen_reference):
    """Each key's row shows the default `config --show` prints (a table row: | `key` | `type` | `default` |)."""
    assert main(["config", "--show"]) == 0
    keys = shown_keys(capsys.readouterr().out)
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| `[^`]*` \| `([^`]*)` \|",
                                                         page(gen_reference, "reference/config.md"), re.M)}
    leaves = {k: v for k, v in keys.items() if v and not k.startswith("task.args")}
    assert leaves and {k: rows.get(k) for k in leaves} == leaves


@pytest.mark.parametrize("task", task_names())
def test_every_task_argument_is_in_the_reference(task, gen_reference):
    """`config --show` with another task lists that task's arguments: each has a row too."""
    keys = shown_keys(describe_config(load_config(None, [f"task.name={task}"])))
    args = [k for k in keys if k.startswith("task.args.")]
    text = page(gen_reference, "reference/config.md")
    section = text.split(f"### {task}\n", 1)[1].split("\n### ", 1)[0]
    assert [a for a in args if f"`{a}`" not in section] == []
