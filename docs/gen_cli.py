"""The CLI reference: every subcommand and flag, read from the real argparse parser of `mmrlvr.cli`."""

from __future__ import annotations

import argparse

from gen_reference import cell, code



class _Captured(Exception):
    pass


def cli_parser() -> argparse.ArgumentParser:
    """The real `mmrlvr` parser: `mmrlvr.cli.main` builds it inline, so stop it where it parses."""
    from unittest import mock

    from mmrlvr import cli

    box = {}

    def capture(self, *args, **kwargs):
        box["parser"] = self
        raise _Captured

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", capture):
        try:
            cli.main(["--help"])
        except _Captured:
            pass
    return box["parser"]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """name -> (help, sub-parser), in the order `mmrlvr --help` lists them."""
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            return {name: (helps.get(name, ""), p) for name, p in action.choices.items()}
    return {}


def _arg_row(a: argparse.Action) -> str:
    name = ", ".join(a.option_strings) if a.option_strings else a.dest
    if a.nargs in ("*", "+") and not a.option_strings:
        name += " ..."
    if a.option_strings and a.nargs != 0:
        name += f" {a.metavar or a.dest.upper()}"
    # argparse marks a `nargs="*"` positional required internally, though it accepts none
    needed = a.nargs not in ("?", "*") if not a.option_strings else a.required
    required = "required" if needed else "optional"
    default = "" if a.default in (None, False, argparse.SUPPRESS) or isinstance(a, argparse._HelpAction) else code(a.default)
    choices = f" (one of {', '.join(map(str, a.choices))})" if a.choices else ""
    return f"| {code(name)} | {required} | {default} | {cell((a.help or '') + choices)} |"


def render_cli() -> str:
    parser = cli_parser()
    subs = subcommands(parser)
    out = ["| command | what it does |", "|---|---|"]
    out += [f"| [`mmrlvr {n}`](#mmrlvr-{n}) | {cell(h)} |" for n, (h, _) in subs.items()]
    out.append("")
    for name, (text, p) in subs.items():
        out.append(f"## mmrlvr {name}\n\n{cell(text)}\n\n```text\n{p.format_usage().strip()}\n```\n")
        out.append("| argument | | default | what it does |\n|---|---|---|---|")
        out += [_arg_row(a) for a in p._actions if not isinstance(a, argparse._HelpAction)]
        if p.epilog:
            out.append(f"\n{cell(p.epilog)}")
        out.append("")
    return "\n".join(out)
