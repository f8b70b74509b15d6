"""The console scripts' command lines: errors in one line, and the nearest word for a typo.

Both scripts (``sessiontemp``, ``journal-inspect``) parse with
:class:`Parser`: every argument error is one line on stderr (what was
given, why it is refused, the fix) and exit status 2, and a word that is
neither a subcommand nor an option of the command it was given to is
answered with the closest one (``'rnu': is not a subcommand. Did you mean
'run'?``, ``'--jsn': is not an option of summary. Did you mean '--json'?``).
Every argument that names a path is read by :class:`PathArgument`, which
refuses an empty one.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from sessiontemp._kernel.entries import empty_path
from sessiontemp.journal.errors import BadInput
from sessiontemp.space import sizes

__all__ = ["Parser", "PathArgument", "nearest", "nearest_option", "not_a_subcommand", "size"]


def size(text: str) -> int:
    """An option's size (:func:`sessiontemp.space.sizes.parse`: ``500M``, ``100K``, ``4096``).

    For ``type=`` of every option that takes a size, in both console
    scripts and the pytest plugin.  The error is argparse's own kind, so
    that its message is shown as it is (for a ValueError, argparse says
    only "invalid size value").
    """
    try:
        return sizes.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def nearest(word: str, candidates: Iterable[str]) -> str:
    """``"Did you mean 'x'? "`` for the candidate closest to *word*, or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"Did you mean {close[0]!r}? " if close else ""


def nearest_option(given: str, options: Iterable[str]) -> str | None:
    """The option closest to *given*, compared without their dashes (``--jsn``, ``--json``)."""
    bare = {o.lstrip("-"): o for o in options if o.startswith("--")}
    close = difflib.get_close_matches(given.lstrip("-"), list(bare), n=1, cutoff=0.6)
    return bare[close[0]] if close else None


def not_a_subcommand(word: str, subcommands: Sequence[str], *, also: str = "") -> BadInput:
    """The error for *word* given where a subcommand belongs (*also*: what else it is not)."""
    return BadInput(repr(word), f"is not a subcommand{also}",
                    f"{nearest(word, subcommands)}Subcommands: {', '.join(subcommands)}")


class PathArgument:
    """The ``type=`` of every argument that names a path: an empty one is refused.

    An empty word is what an unset ``"$ROOT"`` or ``"$OUT"`` expands to, and
    ``Path("")`` is the working directory: a root, a journal or an output
    there would be written where nobody asked.  *what* names the argument
    in the error (``the root``), *fix* says what to pass instead; *convert*
    makes the value (a :class:`~pathlib.Path`, or ``str`` for a word that
    may also be an id).
    """

    def __init__(self, what: str, fix: str, convert: Callable[[str], Any] = Path) -> None:
        self.what = what
        self.fix = fix
        self.convert = convert

    def __call__(self, text: str) -> Any:
        if not text:
            raise argparse.ArgumentTypeError(str(empty_path(self.what, self.fix)))
        return self.convert(text)

    def __repr__(self) -> str:
        # argparse names a type in its "invalid ... value" errors by this.
        return f"path ({self.what})"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, and which knows its own options.

    *prefix* starts each error line (``sessiontemp run``, ``journal-inspect``);
    *command* is the command line whose ``--help`` the line points to.
    """

    def __init__(self, *args: Any, prefix: str, command: str | None = None,
                 **kwargs: Any) -> None:
        self.prefix = prefix
        self.command = command or prefix
        # Before the base's __init__, which adds --help.
        self.options: list[str] = []
        self.subcommands: dict[str, Parser] = {}
        self.chooser: argparse._SubParsersAction[Parser] | None = None
        super().__init__(*args, **kwargs)

    def add_subcommand(self, name: str, **kwargs: Any) -> Parser:
        """A parser for subcommand *name* (after :meth:`add_subcommands`), remembered."""
        assert self.chooser is not None, "call add_subcommands first"
        parser = self.chooser.add_parser(name, **kwargs)
        self.subcommands[name] = parser
        return parser

    def add_subcommands(self, **kwargs: Any) -> None:
        """:meth:`argparse.ArgumentParser.add_subparsers`, kept for :meth:`add_subcommand`."""
        self.chooser = self.add_subparsers(**kwargs)

    def subcommand(self, name: str | None) -> Parser:
        """The parser of subcommand *name*; this one for None or a name it does not know."""
        return self.subcommands.get(name or "", self)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        """As :meth:`argparse.ArgumentParser.add_argument`; the option names are remembered."""
        action = super().add_argument(*args, **kwargs)
        self.options += action.option_strings
        return action

    def error(self, message: str) -> NoReturn:
        """Exit 2 with *message* as one line, pointing to this command's ``--help``."""
        stop = " " if message.endswith("?") else ". "
        self.exit(2, f"{self.prefix}: {message}{stop}See `{self.command} --help`\n")

    def refuse_extras(self, extras: Sequence[str], subcommand: str | None = None,
                      others: Mapping[str, Parser] | None = None) -> None:
        """Exit 2 for the first of *extras* (words ``parse_known_args`` left), naming the
        nearest option of this command when it looks like a mistyped one, or else of one
        of the *others* (the other subcommands, by name)."""
        if not extras:
            return
        word = extras[0]
        of = f" of {subcommand}" if subcommand else ""
        if not word.startswith("-") or word == "-":
            self.error(f"{word!r}: is not an argument{of}")
        given = word.split("=", 1)[0]
        close = nearest_option(given, self.options)
        hint = "" if close is None else f". Did you mean {close!r}?"
        for name, other in (others or {}).items():
            if close is not None or other is self:
                continue
            close = nearest_option(given, other.options)
            if close == given:
                hint = f"; it is an option of {name}"
            elif close is not None:
                hint = f". Did you mean {close!r} (an option of {name})?"
        self.error(f"{given!r}: is not an option{of}{hint}")
