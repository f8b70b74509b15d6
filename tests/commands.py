"""Real commands the tests of starting commands share: a writer that notices losing its directory.

``WRITER`` is a shell loop that rewrites a counter in ``$TMPDIR`` every
20 ms until the file named by ``$STOP`` exists, then writes ``final`` and
exits 0; once its directory is gone, a write fails and it exits 3.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sessiontemp.journal import Store
from sessiontemp.journal.events import Event

E = TypeVar("E", bound=Event)

SH = shutil.which("sh") or "/bin/sh"

WRITER = r"""
i=0
while [ ! -e "$STOP" ]; do
    i=$((i + 1))
    echo "$i" > "$TMPDIR/count.new" && mv "$TMPDIR/count.new" "$TMPDIR/count" || exit 3
    sleep 0.02
done
echo "$i" > "$TMPDIR/final" || exit 3
"""

LOST = 3

# Runs the rest of its arguments (``exec``, same pid) with every signal at its default
# disposition.  A test may be started with some ignored (``nohup`` ignores SIGHUP, a
# shell's background job SIGINT), every child inherits that through exec, and a shell
# cannot trap a signal it started with ignored: a command under test starts clean.
DEFAULT_SIGNALS = [sys.executable, "-c", (
    "import os, signal, sys\n"
    "for s in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:\n"
    "    try:\n"
    "        signal.signal(s, signal.SIG_DFL)\n"
    "    except (OSError, ValueError):\n"
    "        pass\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)]


def in_session(sid: int) -> list[int]:
    """The processes of session *sid* (one a test started with ``start_new_session``)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # After the command name: state, ppid, pgrp, session.
        fields = stat.rpartition(")")[2].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def kill_session(sid: int) -> None:
    """SIGKILL every process of session *sid*: what a test started, whatever group it moved to."""
    for pid in in_session(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_until(condition: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Poll *condition* until it holds; fail naming *what* after *limit* seconds (a hang guard)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def count(directory: Path) -> int:
    """The writer's counter in *directory*, 0 before its first write."""
    try:
        return int((directory / "count").read_text() or 0)
    except FileNotFoundError:
        return 0


def assert_still_writing(directory: Path) -> None:
    """The writer in *directory* is alive and writing: its counter moves on."""
    seen = count(directory)
    wait_until(lambda: count(directory) > seen, f"the writer in {directory} to write again")


def exited(pid: int) -> bool:
    """Whether process *pid* has exited (reaped, or a zombie: its descriptors are closed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    # The state follows the command name, which is in parentheses and may hold spaces.
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def writer_env(stop: Path) -> dict[str, str]:
    return {**os.environ, "STOP": os.fspath(stop)}


def journaled(root: Path, kind: type[E]) -> list[E]:
    """The events of *kind* in the journal under *root*, in order, read-only."""
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return [r.event for r in store.records() if isinstance(r.event, kind)]
    finally:
        store.close()
