"""``journal-inspect events --follow`` behind a writer that retires history as fast as it can.

A real writer process appends through a manager and, after every few
operations, checkpoints, rolls the journal over and retires every sealed
segment (``Retention(segment_bytes=0, history_bytes=0, history_age=0)``,
:func:`tests.faultchild.interleave`).  A real follower,
``journal-inspect events --since 1 --follow --json``, writes into a pipe
the test shrinks to one page and leaves unread: it blocks, falls behind,
and retention retires events before it reads them.  Each run it missed
must come in the stream, in its place, as a ``missed`` record: the events
it printed and those it said it missed are every event written, once each,
in order.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

from sessiontemp import Manager
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.journal import Store
from tests.commands import kill_session
from tests.test_cli import assert_documented
from tests.zygote import JOURNAL_INSPECT

REPO = Path(__file__).resolve().parents[1]

# Rounds of ten leases, each round followed by a checkpoint, a rollover and the
# retirement of every sealed segment.
WRITER = """
import sys
from pathlib import Path
from sessiontemp import Manager
from tests.faultchild import EAGER, interleave
root = Path(sys.argv[1])
with Manager(root, retention=EAGER, durability="relaxed") as manager:
    manager.retain()
    for _ in range(int(sys.argv[2])):
        for _ in range(10):
            manager.acquire().release()
        interleave(root)
"""


def write(root: Path, rounds: int) -> None:
    subprocess.run([sys.executable, "-c", WRITER, os.fspath(root), str(rounds)],
                   cwd=REPO, check=True, timeout=300)


def unread(fd: int) -> int:
    """Bytes waiting in the pipe *fd* reads."""
    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int.from_bytes(buffer, sys.byteorder)


def test_a_follower_behind_retention_says_in_the_stream_which_events_it_missed(
    root: Path,
) -> None:
    Manager(root).close()
    follower = subprocess.Popen(
        [os.fspath(JOURNAL_INSPECT), "--root", os.fspath(root), "events", "--since", "1",
         "--follow", "--json"],
        stdout=subprocess.PIPE, start_new_session=True)
    assert follower.stdout is not None
    out = follower.stdout.fileno()
    # One page: a few lines fill it, and the follower blocks until the test reads.
    fcntl.fcntl(out, fcntl.F_SETPIPE_SZ, 4096)
    records: list[dict[str, Any]] = []
    try:
        # Until the follower has filled its pipe; then much more, retired meanwhile.
        while unread(out) < 2048:
            write(root, 2)
        write(root, 30)
        store = Store(root / JOURNAL_NAME, readonly=True)
        try:
            written = store.last_seq()
            assert store.history().retired_until > 0
        finally:
            store.close()

        def reached() -> int:
            """The last event the follower printed or said it missed."""
            if not records:
                return 0
            last = records[-1]
            return int(last["missed"]["last"] if "missed" in last else last["seq"])

        buffered = b""
        while reached() < written:
            ready, _, _ = select.select([out], [], [], 60)
            assert ready, f"the follower stopped at {reached()} of {written}"
            chunk = os.read(out, 65536)
            assert chunk, f"the follower ended at {reached()} of {written}"
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            records += [json.loads(line) for line in lines]
    finally:
        kill_session(follower.pid)
        follower.wait()
    missed = [r for r in records if "missed" in r]
    assert missed, "the follower fell behind and missed nothing: the test did not test"
    # Every event written is printed or said to be missed, once, in order.
    covered: list[int] = []
    for record in records:
        if "missed" in record:
            assert_documented("missed", record)
            first, last = record["missed"]["first"], record["missed"]["last"]
            assert record["missed"]["count"] == last - first + 1
            assert record["resumed"] == last + 1
            covered += range(first, last + 1)
        else:
            assert_documented("event", record)
            covered.append(record["seq"])
    assert covered == list(range(1, written + 1))
    seen = len(records) - len(missed)
    assert seen + sum(r["missed"]["count"] for r in missed) == written


def test_a_follower_that_keeps_up_misses_nothing(root: Path) -> None:
    """Retired only once read: no ``missed`` record, every event printed."""
    with Manager(root) as manager:
        manager.retain()
        manager.acquire().release()
    shown = subprocess.run(
        [os.fspath(JOURNAL_INSPECT), "--root", os.fspath(root), "events", "--since", "1",
         "--until", "4", "--follow"], capture_output=True, text=True, timeout=60, check=True)
    assert "missed" not in shown.stdout
    assert len(shown.stdout.splitlines()) == 1 + 4


def test_a_follower_starting_after_retention_names_the_events_retired_since_its_start(
    root: Path,
) -> None:
    """``--since 1`` on a journal whose first events are gone: missed, then the rest."""
    write(root, 3)
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        retired, written = store.history().retired_until, store.last_seq()
    finally:
        store.close()
    assert retired > 0
    shown = subprocess.run(
        [os.fspath(JOURNAL_INSPECT), "--root", os.fspath(root), "events", "--since", "1",
         "--until", str(written), "--follow"],
        capture_output=True, text=True, timeout=60, check=True)
    lines = shown.stdout.splitlines()
    assert lines[1] == (f"missed: events 1 to {retired} ({retired}) were retired before this "
                        f"reader got to them; resuming at {retired + 1}")
    assert len(lines) == 2 + written - retired
    # Without --since, what was retired before the follower started is not missed.
    unasked = subprocess.run(
        [os.fspath(JOURNAL_INSPECT), "--root", os.fspath(root), "events",
         "--until", str(written), "--follow"],
        capture_output=True, text=True, timeout=60, check=True)
    assert "missed" not in unasked.stdout
