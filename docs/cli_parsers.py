"""The real argparse parsers of the two console scripts, as the CLI reference shows them.

sphinx-argparse reads each parser's texts as reStructuredText; two of them
are made for a terminal instead, and are adapted here without changing what
they say:

- an epilog laid out in columns (examples, exit statuses) becomes a literal
  block, shown once, under the command it belongs to, as ``--help`` shows it;
- the default root, which the help names as the path of the machine running
  the build, is named as what it is.
"""

from __future__ import annotations

import argparse

from sessiontemp import __main__ as sessiontemp_main
from sessiontemp._kernel.root import default_root
from sessiontemp.cli import journal_inspect as cli

__all__ = ["journal_inspect", "sessiontemp"]


def _literal(text: str) -> str:
    return "::\n\n" + "\n".join(f"   {line}" if line else "" for line in text.splitlines())


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:  # argparse keeps its subcommands nowhere else
        if isinstance(action, argparse._SubParsersAction):
            found.extend(action.choices.values())
    return found


def _adapt(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    here = str(default_root())
    for each in [parser, *_subparsers(parser)]:
        for action in each._actions:
            if action.help and here in action.help:
                action.help = action.help.replace(
                    here, "the per-user root under the system temporary directory")
        if each is not parser and each.epilog == parser.epilog:
            each.epilog = None
    if parser.epilog and "\n" in parser.epilog:
        parser.epilog = _literal(parser.epilog)
    return parser


def journal_inspect() -> argparse.ArgumentParser:
    """The parser of ``journal-inspect``."""
    return _adapt(cli.build_parser())


def sessiontemp() -> argparse.ArgumentParser:
    """The parser of ``sessiontemp`` (and ``python -m sessiontemp``)."""
    return _adapt(sessiontemp_main.build_parser())
