"""Every code block the docs mark `<!-- runnable -->` runs: YAML through `validate_config`, `mmrlvr`
commands through the real command line. The marker convention is in docs/contributing-docs.md."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
from pathlib import Path

import pytest
import yaml

from mmrlvr.cli import main
from mmrlvr.config import load_config
from mmrlvr.checks.validate import config_errors

VLLM_MISSING = "rollout.engine='vllm': expected an installed vLLM"

from .conftest import DOCS, ROOT, load_docs_module

MARK = "<!-- runnable -->"


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(where "page.md:line", language, body) of every block whose previous non-blank line is the marker."""
    gen = load_docs_module("gen_reference")
    out = []
    for path in sorted(DOCS.rglob("*.md")):
        for b in gen.fenced_blocks(path.read_text(encoding="utf-8")):
            if b["before"] == MARK:
                lang = b["info"].split()[0] if b["info"] else ""
                out.append((f"{path.relative_to(DOCS)}:{b['start'] + 1}", lang, b["body"]))
    return out


BLOCKS = runnable_blocks()


def test_the_marker_convention_is_found():
    md = "text\n\n<!-- runnable -->\n```yaml\na: 1\n```\n\n```bash\nnot marked\n```\n<!-- runnable -->\n\n````bash\nmmrlvr x\n````\n"
    gen = load_docs_module("gen_reference")
    marked = [(b["info"], b["body"]) for b in gen.fenced_blocks(md) if b["before"] == MARK]
    assert marked == [("yaml", "a: 1"), ("bash", "mmrlvr x")]  # a blank line between marker and fence is fine
    langs = {lang for _, lang, _ in BLOCKS}
    assert {"yaml", "bash"} <= langs, "the reference pages mark yaml and bash blocks runnable"


REDIRECTS = (">", ">>", "2>", "2>>", "&>")


def commands_of(body: str) -> list[list[str]]:
    """The argv of each command of a bash block: `\\` continuation lines joined, comments dropped,
    an output redirection (`> /dev/null`, `2>&1`) dropped; pipes and `&&` are refused."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        argv, words = [], shlex.split(line, comments=True)
        assert not {"|", "&&", ";", "||"} & set(words), f"one mmrlvr command per line, no pipes: {line!r}"
        skip = False
        for w in words:
            if skip:
                skip = False
            elif w in REDIRECTS:
                skip = True
            elif not w.startswith(("2>&", ">/", "2>/")):
                argv.append(w)
        out.append(argv)
    return out


def test_commands_of_joins_and_strips():
    body = "# a comment\nmmrlvr train c.yaml a=1 \\\n    b=2 > /dev/null\n\nmmrlvr config --show 2>&1  # note\n"
    assert commands_of(body) == [["mmrlvr", "train", "c.yaml", "a=1", "b=2"], ["mmrlvr", "config", "--show"]]


def redirect_output_dir(argv: list[str], tmp: Path) -> list[str]:
    """`output_dir=runs/x` -> a temporary directory, so the docs' commands write nothing in the checkout."""
    return [f"output_dir={tmp / Path(a.split('=', 1)[1]).name}" if a.startswith("output_dir=") else a for a in argv]


@pytest.mark.parametrize("where,lang,body", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_runnable_block(where, lang, body, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    if lang == "yaml":
        snippet = tmp_path / "snippet.yaml"
        snippet.write_text(body)
        assert isinstance(yaml.safe_load(body), dict), f"{where}: a config snippet is a mapping"
        # judged as on a machine with the snippet's optional extras installed (the vLLM page's
        # `engine: vllm` is refused where vLLM is missing, which is that check's job, not the page's)
        errors = [e for e in config_errors(load_config(snippet)) if not e.startswith(VLLM_MISSING)]
        assert not errors, f"{where}: " + "\n".join(errors)
        return
    assert lang in ("bash", "console", "sh"), f"{where}: only yaml and bash blocks can be runnable, not {lang!r}"
    commands = commands_of(body)
    assert commands, f"{where}: an empty runnable block"
    for argv in commands:
        line = shlex.join(argv)
        assert argv[0] == "mmrlvr", f"{where}: runnable commands start with mmrlvr, got {line!r}"
        argv = redirect_output_dir(argv[1:], tmp_path)
        try:
            rc = main(argv)
        except SystemExit as exc:  # --help exits through argparse
            rc = exc.code or 0
        assert rc == 0, f"{where}: `{line}` exited {rc}:\n{capsys.readouterr().err[-2000:]}"
