"""The CLI and verifier references list what the programs themselves print: every flag of every
subcommand's `--help`, every verifier of `mmrlvr verifiers`."""

from __future__ import annotations

import re

import pytest

from mmrlvr.cli import main

from .conftest import page


def help_text(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_every_subcommand_and_flag_of_the_help_is_in_the_cli_reference(capsys, gen_reference):
    top = help_text([], capsys)
    subs = re.search(r"\{([a-z,-]+)\}", top).group(1).split(",")
    assert {"train", "eval", "config", "score", "verifiers"} <= set(subs)
    text = page(gen_reference, "reference/cli.md")
    missing, seen = [], set()
    for sub in subs:
        section = text.split(f"## mmrlvr {sub}\n", 1)[1].split("\n## ", 1)[0] if f"## mmrlvr {sub}\n" in text else ""
        # option lines of the help: "  -o OUTPUT, --output OUTPUT   help text"
        heads = [m.group(1) for m in re.finditer(r"^  (-\S.*?)(?:  |$)", help_text([sub], capsys), re.M)]
        flags = {f for head in heads for f in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", head)}
        seen |= flags
        # the flags named in the first cell of the section's table rows ("-o, --output OUTPUT")
        listed = {w.strip(",") for first in re.findall(r"^\| `([^`]+)`", section, re.M) for w in first.split()}
        missing += [f"{sub} (no section)"] if not section else [f"{sub} {f}" for f in sorted(flags - {"-h", "--help"}) if f not in listed]
    assert {"--checkpoint", "--samples", "--merge", "--verifier", "-o", "--output"} <= seen  # the help was read
    assert not missing, f"in --help but not in docs/reference/cli.md: {missing}"


def test_cli_reference_marks_optional_positionals(gen_reference):
    """`overrides` takes zero or more values: optional, although argparse marks it required inside."""
    text = page(gen_reference, "reference/cli.md")
    assert "| `overrides ...` | optional |" in text and "| `config` | required |" in text


def test_every_listed_verifier_has_a_section(capsys, gen_reference):
    assert main(["verifiers"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert {"count", "math", "iou", "tiou", "format"} <= set(names)
    text = page(gen_reference, "reference/verifiers.md")
    assert [n for n in names if f"\n## {n}\n" not in text] == []
    # each built-in's example is scored for real: the count example is a correct, well-formed answer
    count = text.split("\n## count\n", 1)[1].split("\n## ", 1)[0]
    assert "| score | 1 |" in count and "`correct` = 1, `format` = 1" in count


def test_prose_keeps_lists_and_shows_tags(gen_reference):
    doc = "Scores <answer>N</answer>,\nthen `<think>` stays code.\n- first\n  item\n- second\n\n1. one\n2. two"
    # the text run is joined and a blank line opens the list; tags outside backticks are escaped
    assert gen_reference.prose(doc) == [
        "Scores &lt;answer&gt;N&lt;/answer&gt;, then `<think>` stays code.\n\n- first item\n- second\n",
        "1. one\n2. two\n",
    ]


def test_everything_a_run_writes_is_in_the_run_directory_page(tiny_run, gen_reference):
    """Each entry of a real run directory (files, folders, the lock) has a row or a mention."""
    text = page(gen_reference, "reference/run-directory.md")
    entries = {p.name + ("/" if p.is_dir() else "") for p in tiny_run.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "checkpoints/", "warm_start/", "token_roles/", "samples/"} <= entries
    # numbered files and folders are documented as step_N
    shown = {re.sub(r"step_\d+", "step_N", e) for e in entries}
    missing = [e for e in sorted(shown) if f"`{e}" not in text]  # a row starts `name or `folder/...
    assert not missing, f"a run writes these, docs/reference/run-directory.md does not say what they are: {missing}"
    inside = {re.sub(r"step_\d+", "step_N", f"{p.parent.name}/{p.name}") for d in ("samples", "token_roles")
              for p in (tiny_run / d).iterdir()}
    assert inside <= {"samples/step_N.jsonl", "token_roles/step_N.jsonl"} and all(f"`{x}`" in text for x in inside)
