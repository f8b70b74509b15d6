"""Both console scripts with their standard streams closed or broken, through a real shell.

A descriptor closed by the shell (``>&-``, ``2>&-``, ``<&-``) or a pipe whose
reader has left changes nothing about what a script does: ``sessiontemp
run`` exits with its command's status, a command it starts finds the same
descriptors closed, ``sessiontemp recover`` still recovers, and
``journal-inspect`` still answers by its status; a reader that leaves early
ends ``recover`` and ``journal-inspect`` as SIGPIPE ends other tools, with
nothing on stderr.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from sessiontemp import GENERATION_PREFIX, Manager
from tests.commands import SH, exited, wait_until
from tests.test_cli import Child, tampered
from tests.test_timeline import many_generations, write

BIN = Path(sys.executable).parent
SESSIONTEMP = os.fspath(BIN / "sessiontemp")
JOURNAL_INSPECT = os.fspath(BIN / "journal-inspect")
SIGPIPE_STATUS = 128 + signal.SIGPIPE

# The command exits 9 when its descriptor 0, 1 or 2 (argv[1]) is closed, 8 when open.
PROBE = ("import os, sys\n"
         "try:\n    os.fstat(int(sys.argv[1]))\nexcept OSError:\n    sys.exit(9)\nsys.exit(8)")


def shell(line: str, *args: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``sh -c LINE`` with *args* as $1..., the way a user's shell closes descriptors."""
    return subprocess.run([SH, "-c", line, "sh", *(os.fspath(a) for a in args)],
                          capture_output=True,
                          text=True, timeout=120, **kwargs)


def broken_pipe() -> int:
    """The writing end of a pipe whose reader has already left."""
    r, w = os.pipe()
    os.close(r)
    return w


def directories(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(GENERATION_PREFIX))


@pytest.fixture
def killed(tmp_path: Path) -> tuple[Path, Path]:
    """A root whose manager was SIGKILLed holding a directory: (root, directory)."""
    root = tmp_path / "root"
    child = Child(root)
    child.ask("retain")
    lease = child.ask("acquire")
    child.kill()
    return root, Path(lease["path"])


# -- sessiontemp run ---------------------------------------------------------------------


@pytest.mark.parametrize("closed", [">&-", "2>&-", "<&-", "<&- >&- 2>&-"])
def test_run_exits_with_the_commands_status_whichever_standard_descriptor_is_closed(
    root: Path, closed: str,
) -> None:
    done = shell(f'"$1" run --root "$2" -- sh -c "exit 3" {closed}', SESSIONTEMP, root)
    assert done.returncode == 3, done.stderr
    assert directories(root) == []


def test_run_into_a_pipe_whose_reader_left_exits_with_the_commands_status(root: Path) -> None:
    # Into `head -1`: the command's own writes meet the reader's exit; the status is its own.
    piped = subprocess.run(["bash", "-c", 'set -o pipefail; "$1" run --root "$2" -- sh -c '
                            '"seq 100000; exit 3" | head -1', "bash", SESSIONTEMP,
                            os.fspath(root)], capture_output=True, text=True, timeout=120)
    assert (piped.returncode, piped.stdout, piped.stderr) == (3, "1\n", "")
    out = broken_pipe()
    try:
        done = subprocess.run([SESSIONTEMP, "run", "--root", os.fspath(root), "--", SH, "-c",
                               "exit 3"], stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(out)
    assert (done.returncode, done.stderr) == (3, "")
    assert directories(root) == []


@pytest.mark.parametrize(("closed", "fd"), [(">&-", 1), ("2>&-", 2), ("<&-", 0)])
def test_the_command_finds_closed_what_the_wrapper_was_given_closed(
    root: Path, closed: str, fd: int,
) -> None:
    probe = [sys.executable, "-c", PROBE, str(fd)]
    line = f'"$1" run --root "$2" -- "$3" "$4" "$5" "$6" {closed}'
    assert shell(line, SESSIONTEMP, root, *probe).returncode == 9
    # And open what it was given open.
    assert shell(line.replace(closed, ""), SESSIONTEMP, root, *probe).returncode == 8


def test_a_message_run_cannot_write_to_stderr_leaves_the_commands_status(
    root: Path,
) -> None:
    """The wrapper says on stderr that a left-over process still holds the directory."""
    left_running = 'sleep 1 </dev/null >/dev/null 2>&1 & echo $!; exit 3'
    for stderr in (broken_pipe(), None):
        if stderr is None:
            done = shell('"$1" run --root "$2" -- sh -c "$3" 2>&-', SESSIONTEMP, root,
                         left_running)
        else:
            try:
                done = subprocess.run([SESSIONTEMP, "run", "--root", os.fspath(root), "--",
                                       SH, "-c", left_running], stdout=subprocess.PIPE,
                                      stderr=stderr, text=True, timeout=120)
            finally:
                os.close(stderr)
        assert done.returncode == 3
        wait_until(functools.partial(exited, int(done.stdout)), "the left-over sleep to exit")
    assert subprocess.run([SESSIONTEMP, "recover", "--root", os.fspath(root)],
                          capture_output=True, timeout=120).returncode == 0
    assert directories(root) == []


# -- sessiontemp recover -----------------------------------------------------------------


def test_recover_with_stdout_closed_still_recovers_and_exits_0(
    killed: tuple[Path, Path],
) -> None:
    root, directory = killed
    done = shell('"$1" recover --root "$2" >&-', SESSIONTEMP, root)
    assert (done.returncode, done.stderr) == (0, "")
    assert not directory.exists()


def test_recover_whose_reader_left_recovers_then_ends_quietly_as_sigpipe_does(
    killed: tuple[Path, Path],
) -> None:
    root, directory = killed
    out = broken_pipe()
    try:
        done = subprocess.run([SESSIONTEMP, "recover", "--root", os.fspath(root)], stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(out)
    assert (done.returncode, done.stderr) == (-signal.SIGPIPE, "")
    assert not directory.exists()


def test_bad_input_with_stderr_closed_is_still_exit_status_2(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    assert shell('"$1" recover --root "$2" 2>&-', SESSIONTEMP, afile).returncode == 2
    assert shell('"$1" --root "$2" 2>&-', JOURNAL_INSPECT, afile).returncode == 2
    assert shell('"$1" rnu 2>&-', SESSIONTEMP).returncode == 2


# -- journal-inspect ---------------------------------------------------------------------


def test_journal_inspect_with_stdout_closed_answers_by_its_exit_status(
    tmp_path: Path, root: Path,
) -> None:
    with Manager(root) as manager:
        manager.retain()
        manager.acquire().release()
    assert shell('"$1" --root "$2" >&-', JOURNAL_INSPECT, root).returncode == 0
    assert shell('"$1" --root "$2" verify >&- 2>&-', JOURNAL_INSPECT, root).returncode == 0
    problems = shell('"$1" "$2" verify >&-', JOURNAL_INSPECT, tampered(root, tmp_path))
    assert (problems.returncode, problems.stderr) == (1, "")


def test_journal_inspect_into_head_prints_one_line_and_ends_as_sigpipe_does(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.sqlite3"
    # More events than a pipe holds, so the writer meets the reader's exit.
    write(journal, many_generations(400), batch=400)
    done = subprocess.run(["bash", "-c", 'set -o pipefail; "$1" "$2" events | head -1',
                           "bash", JOURNAL_INSPECT, os.fspath(journal)],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["seq", "time", "kind", "fields"]
    assert (done.returncode, done.stderr) == (SIGPIPE_STATUS, "")
    out = broken_pipe()
    try:
        quiet = subprocess.run([JOURNAL_INSPECT, os.fspath(journal), "--json"], stdout=out,
                               stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(out)
    assert (quiet.returncode, quiet.stderr) == (-signal.SIGPIPE, "")


# -- control characters ------------------------------------------------------------------


def test_a_label_with_control_characters_is_escaped_for_each_output_and_kept_as_given(
    root: Path, tmp_path: Path,
) -> None:
    """A bell, a colour change, a terminal-title escape and a newline in a command line."""
    argument = "bell:\a red:\x1b[31m title:\x1b]0;owned\x07 line:\nfake c1:\x9b2J"
    ran = subprocess.run([SESSIONTEMP, "run", "--root", os.fspath(root), "--", "printf",
                          "%s", argument], capture_output=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    label = f"printf %s {shlex.quote(argument)}"

    def inspect(*args: str | Path) -> str:
        done = subprocess.run([JOURNAL_INSPECT, "--root", os.fspath(root), *map(str, args)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # The journal holds it exactly as given; JSON escapes it itself.
    (acquired,) = [json.loads(line) for line in inspect("events", "--kind", "lease.acquired",
                                                        "--json").splitlines()]
    assert acquired["fields"]["label"] == label
    escaped = ("bell:\\x07 red:\\x1b[31m title:\\x1b]0;owned\\x07 line:\\x0afake "
               "c1:\\x9b2J")
    for text in (inspect("events", "--kind", "lease.acquired"),
                 inspect("explain", acquired["fields"]["generation"])):
        assert escaped in text
        assert not any(c in text for c in "\a\x1b\x9b")
        assert "\nfake" not in text
    svg = tmp_path / "t.svg"
    inspect("timeline", "-o", svg)
    picture = ElementTree.parse(svg).getroot()  # noqa: S314 (our own output, checked)
    titles = [t.text or "" for t in picture.iter("{http://www.w3.org/2000/svg}title")]
    assert any(escaped in t for t in titles)
