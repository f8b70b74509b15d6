"""An empty path (what an unset ``"$ROOT"`` expands to) is bad input, never the working directory.

``Path("")`` is ``.``: a root, a journal or an output given as ``""`` would
otherwise be the directory the command was started in.  Every argument of
both console scripts that names a path is found from their parsers, so an
option added later is covered without a change here.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sessiontemp import BadInput, Manager, recover, remove_artifact, remove_session
from sessiontemp import __main__ as sessiontemp_main
from sessiontemp.cli import journal_inspect as cli
from sessiontemp.cli.arguments import Parser, PathArgument
from sessiontemp.inspect import locate
from tests import zygote
from tests.test_root import fingerprint

SAID = "is an empty path, which would mean the current directory"
SCRIPTS: dict[str, tuple[Callable[[], Parser], str]] = {
    "sessiontemp": (sessiontemp_main.build_parser, "sessiontemp.scripts:sessiontemp"),
    "journal-inspect": (cli.build_parser, "sessiontemp.scripts:journal_inspect"),
}
# A metavar that says the argument is a path (DIR, FILE, PATH|GENERATION).
PATH_WORDS = ("DIR", "FILE", "PATH")


def arguments() -> Iterator[tuple[str, str, argparse.Action]]:
    """(script, subcommand, action) for every argument of every subcommand of both scripts."""
    for script, (build, _) in SCRIPTS.items():
        parser = build()
        for name, sub in parser.subcommands.items():
            for action in sub._actions:  # argparse lists a parser's arguments nowhere else
                yield script, name, action


def path_arguments() -> list[tuple[str, str, argparse.Action]]:
    return [(s, n, a) for s, n, a in arguments() if isinstance(a.type, PathArgument)]


def empty_forms(action: argparse.Action) -> list[list[str]]:
    """The ways to give *action* an empty value: ``--opt ""``, ``--opt=``, ``-o ""``."""
    if not action.option_strings:
        return [[""]]
    forms = [[option, ""] for option in action.option_strings]
    forms += [[f"{option}="] for option in action.option_strings if option.startswith("--")]
    return forms


def command_line(script: str, subcommand: str, action: argparse.Action, empty: list[str]
                 ) -> list[str]:
    """*subcommand* with *empty* given to *action*, and a value for everything else it needs."""
    parser = SCRIPTS[script][0]().subcommand(subcommand)
    words = [subcommand]
    tail: list[str] = []
    for other in parser._actions:
        if other.dest in (action.dest, "help"):
            continue
        if other.nargs == argparse.REMAINDER:
            tail = ["--", "true"]
        elif not other.option_strings and other.nargs is None:
            # A word it accepts (`integrate claude-code`), or any for a free one.
            words.append(next(iter(other.choices)) if other.choices else "placeholder")
        elif other.required:
            words += [other.option_strings[0], "-"]
    return [*words, *empty, *tail]


@pytest.fixture(scope="module")
def used_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with a journal and history, its manager closed: the working directory of every
    run below, so that a command that took "" for "." would read, write or repair it."""
    root = tmp_path_factory.mktemp("cwd") / "root"
    with Manager(root) as manager:
        manager.retain()
        with manager.acquire(label="one"):
            pass
        manager.rotate()
        manager.acquire(label="two").release()
    return root


def run_script(script: str, words: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """*script* with *words*, in a process of its own (forked from one that imported it)."""
    entry = SCRIPTS[script][1]
    return zygote.shared("sessiontemp.cli.journal_inspect", "sessiontemp.__main__").run(
        [script, *words], entry=entry, cwd=cwd)


def test_every_argument_that_names_a_path_refuses_an_empty_one() -> None:
    found = {(s, n, a.dest) for s, n, a in path_arguments()}
    # The arguments known today; the checks below cover any added later.
    assert {("sessiontemp", "run", "root"), ("sessiontemp", "recover", "root"),
            ("journal-inspect", "timeline", "output"), ("journal-inspect", "explain", "target"),
            ("journal-inspect", "events", "generation")} <= found
    assert {n for s, n, d in found if s == "journal-inspect" and d == "root"} == set(
        cli.SUBCOMMANDS)
    for script, name, action in arguments():
        assert action.type is not Path, (script, name, action.dest, "read with a bare Path")
        if any(word in (action.metavar or "") for word in PATH_WORDS):
            assert isinstance(action.type, PathArgument), (script, name, action.dest)


@pytest.mark.parametrize(("script", "subcommand", "action"), path_arguments(),
                         ids=lambda v: v.dest if isinstance(v, argparse.Action) else v)
def test_an_empty_path_is_bad_input_and_touches_nothing_in_the_working_directory(
    used_root: Path, script: str, subcommand: str, action: argparse.Action,
) -> None:
    before = fingerprint(used_root)
    for empty in empty_forms(action):
        words = command_line(script, subcommand, action, empty)
        done = run_script(script, words, used_root)
        assert done.returncode == 2, (words, done)
        assert done.stdout == "", words
        assert len(done.stderr.splitlines()) == 1, (words, done.stderr)
        assert SAID in done.stderr, (words, done.stderr)
        assert "Traceback" not in done.stderr
    assert fingerprint(used_root) == before


@pytest.mark.parametrize("words", [["", "summary"], [""], ["", "fsck", "--repair"]])
def test_an_empty_journal_path_given_to_journal_inspect_is_bad_input(
    used_root: Path, words: list[str],
) -> None:
    before = fingerprint(used_root)
    done = run_script("journal-inspect", words, used_root)
    assert done.returncode == 2, done
    assert f"the journal '': {SAID}" in done.stderr
    assert fingerprint(used_root) == before


@pytest.mark.parametrize("subcommand", ["run", "recover"])
def test_an_unset_root_variable_is_refused_by_sessiontemp_from_a_shell(
    used_root: Path, subcommand: str,
) -> None:
    before = fingerprint(used_root)
    script = Path(sys.executable).with_name("sessiontemp")
    tail = " -- true" if subcommand == "run" else ""
    done = subprocess.run(
        ["sh", "-c", f'unset ROOT; exec "$0" {subcommand} --root "$ROOT"{tail}', str(script)],
        cwd=used_root, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done
    assert f"sessiontemp {subcommand}: argument --root: the root '': {SAID}" in done.stderr
    assert "leave out --root for the per-user default" in done.stderr
    assert fingerprint(used_root) == before


@pytest.mark.parametrize("call", [
    lambda: Manager(""), lambda: recover(""), lambda: remove_session("", "s"),
    lambda: remove_artifact("", "0123456789abcdef"), lambda: locate(None, ""),
    lambda: locate("", None),
], ids=["Manager", "recover", "remove_session", "remove_artifact", "locate-root",
        "locate-journal"])
def test_the_library_refuses_an_empty_path_as_bad_input(
    used_root: Path, monkeypatch: pytest.MonkeyPatch, call: Callable[[], object],
) -> None:
    monkeypatch.chdir(used_root)
    before = fingerprint(used_root)
    with pytest.raises(BadInput, match=SAID) as caught:
        call()
    assert isinstance(caught.value, ValueError)
    assert fingerprint(used_root) == before
