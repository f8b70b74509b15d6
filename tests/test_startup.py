"""A process pays at start only for what it uses: no asyncio, filelock, sqlite_utils or structlog.

``import sessiontemp`` loads none of them; a manager that opens an
existing root, leases a directory and closes loads none either; and a
plain ``sessiontemp run -- CMD`` (the form a harness starts each command
with) loads none of them, nor the argument parser or importlib.metadata.
Each check is a real interpreter listing what it imported, so an eager
import coming back in any module on the way fails it.  (How long the start
takes is measured by tools/bench_startup.py, never asserted.)
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessiontemp import __main__ as script

# Used only on some paths: an asyncio program, a lock by path (never taken by
# the library), making a schema, an event someone sees.
LAZY = ("asyncio", "filelock", "sqlite_utils", "structlog")
# What only the full command line needs: the parser, and --version's metadata.
PARSER = ("argparse", "importlib.metadata", "difflib")

LISTED = f"""
import sys
print(__import__("json").dumps(sorted(m for m in {LAZY + PARSER + ("logging",)!r}
                                      if m in sys.modules)))
"""


def imported(code: str, *args: str) -> list[str]:
    """The modules of LAZY, PARSER and logging that a fresh interpreter running *code* imported."""
    done = subprocess.run([sys.executable, "-c", code + LISTED, *args], capture_output=True,
                          text=True, timeout=120, check=True)
    listed: list[str] = json.loads(done.stdout.splitlines()[-1])
    return listed


def test_importing_sessiontemp_imports_none_of_the_lazy_modules() -> None:
    assert imported("import sessiontemp") == []


def test_a_manager_that_leases_and_closes_on_an_existing_root_imports_none_of_them(
    tmp_path: Path,
) -> None:
    use = """
import sys
from sessiontemp import Manager
with Manager(sys.argv[1]) as m:
    m.retain()
    with m.acquire() as lease:
        lease.env()
    m.rotate()
    m.release()
"""
    imported(use, str(tmp_path))  # makes the root: its schema needs sqlite_utils
    assert imported(use, str(tmp_path)) == []


def test_a_warning_in_a_process_without_logging_set_up_still_reaches_nobody(
    tmp_path: Path,
) -> None:
    # A manager dies holding a directory: the next recovery declares it dead,
    # a warning, which structlog is then imported to build.
    dying = ("import os, sys\nfrom sessiontemp import Manager\nm = Manager(sys.argv[1])\n"
             "m.retain()\nm.acquire()\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", dying, str(tmp_path)], check=True, timeout=120)
    done = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom sessiontemp import recover\n"
         "assert recover(sys.argv[1]).dead\n", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True)
    assert (done.stdout, done.stderr) == ("", "")


def test_a_warning_where_structlog_can_no_longer_be_imported_goes_to_logging_as_one_line(
    tmp_path: Path,
) -> None:
    # As in a process that gave up its privileges after it started: the
    # import fails (sys.modules[name] = None makes it raise ImportError).
    dying = ("import os, sys\nfrom sessiontemp import Manager\nm = Manager(sys.argv[1])\n"
             "m.retain()\nm.acquire()\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", dying, str(tmp_path)], check=True, timeout=120)
    recovering = """
import logging, sys
sys.modules["structlog"] = None
lines = []
handler = logging.Handler()
handler.emit = lambda record: lines.append((record.levelname, record.getMessage()))
logging.getLogger().addHandler(handler)
from sessiontemp import recover
report = recover(sys.argv[1])
print(__import__("json").dumps({"dead": list(report.dead), "lines": lines}))
"""
    done = subprocess.run([sys.executable, "-c", recovering, str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    [dead] = seen["dead"]
    warned = [line for level, line in seen["lines"] if level == "WARNING"]
    assert any(line.startswith("manager.dead ") and f"manager='{dead}'" in line
               for line in warned), seen


def run_imports(*words: str) -> list[str]:
    """What the ``sessiontemp`` console script imported, of LAZY and PARSER, running *words*."""
    console = Path(sys.executable).parent / "sessiontemp"
    argv = [str(console)] if console.is_file() else ["-m", "sessiontemp"]
    done = subprocess.run([sys.executable, "-X", "importtime", *argv, *words],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    return sorted(names & {*LAZY, *PARSER})


def test_a_plain_run_imports_neither_the_lazy_modules_nor_the_parser(tmp_path: Path) -> None:
    root = str(tmp_path / "root")
    run_imports("run", "--root", root, "--", "true")  # makes the root
    assert run_imports("run", "--root", root, "--", "true") == []
    assert run_imports("run", f"--root={root}", "--", "true") == []


def test_any_other_command_line_is_read_by_the_parser(tmp_path: Path) -> None:
    # Here an option before the subcommand: the parser is what reads that.
    root = str(tmp_path / "root")
    assert "argparse" in run_imports("--root", root, "run", "--", "true")


# Words a command line is made of: the subcommand, its options and their
# values, the separator, a command, and option-like words after it.
WORDS = ("run", "--", "--root", "--root=d", "d", "-x", "x", "--session", "-", "recover")


def parsed(words: list[str]) -> tuple[str, Path | None, object, list[str]]:
    # Only words that start with the subcommand: nothing to arrange before parsing.
    args, extras = script.build_parser().parse_known_args(words)
    assert extras == []
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    return args.subcommand, args.root, args.session, command


def test_a_plain_run_is_read_as_the_parser_reads_it() -> None:
    plain = 0
    for length in range(1, 6):
        for words in map(list, itertools.product(WORDS, repeat=length)):
            seen = script.Plain.of(words)
            if seen is None:
                continue
            plain += 1
            assert parsed(words) == ("run", seen.root, None, seen.command), words
    assert plain > 100


@pytest.mark.parametrize("words", [
    ["run"], ["run", "--"], ["run", "x"], ["run", "--root", "--", "x"],
    ["run", "--root=", "--", "x"], ["run", "--", "--", "x"], ["--root", "d", "run", "--", "x"],
    ["run", "--session", "s", "--", "x"], ["run", "--rot", "d", "--", "x"],
    ["recover"], ["--help"], ["run", "--help"], ["--version"],
])
def test_help_errors_and_every_other_form_go_to_the_parser(words: list[str]) -> None:
    assert script.Plain.of(words) is None
