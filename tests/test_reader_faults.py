"""journal-inspect meeting the faults of TESTING.md's table: no descriptor left, a kill, a follow.

Real processes throughout: the console script under a real RLIMIT_NOFILE,
killed by a real SIGKILL, and a follower of the journal while a real
neighbour process rolls it over and retires what it sealed.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sessiontemp import Manager
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.inspect import EventRow, events, verify
from tests.faultchild import segment_files
from tests.neighbour import Neighbour
from tests.zygote import JOURNAL_INSPECT

SUBCOMMANDS = (["summary"], ["verify"], ["state"], ["events"], ["fsck"], ["timeline"],
               ["explain", "00000000000000000000000000000000"])


def busy_root(root: Path, neighbour: Neighbour, rounds: int = 4) -> None:
    """A root whose journal has sealed segments, a retired part and a live tail."""
    with Manager(root, durability="relaxed") as manager:
        manager.retain()
        for i in range(rounds):
            for _ in range(10):
                manager.acquire().release()
                manager.rotate()
            if i % 2:
                neighbour.interleave(root)
            else:
                neighbour.seal(root)


def inspect(root: Path, args: list[str], *, limit: int | None = None,
            output: Path | None = None) -> subprocess.CompletedProcess[str]:
    def low() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    extra = ["-o", str(output)] if args == ["timeline"] and output is not None else []
    return subprocess.run([str(JOURNAL_INSPECT), "--root", str(root), *args, *extra],
                          capture_output=True, text=True, preexec_fn=low, timeout=120,
                          check=False)


@pytest.mark.parametrize(("subcommands", "limits"), [
    (SUBCOMMANDS[:2], range(6, 14, 2)),
    pytest.param(SUBCOMMANDS, range(6, 24), marks=pytest.mark.slow),
], ids=["sample", "every"])
def test_journal_inspect_short_of_descriptors_answers_or_says_so_in_one_line(
    root: Path, neighbour: Neighbour, tmp_path: Path, subcommands: tuple[list[str], ...],
    limits: range,
) -> None:
    busy_root(root, neighbour)
    seen: set[str] = set()
    # From the fewest an interpreter starts with up: every descriptor the
    # reader opens (the head, its -wal and -shm, each segment's) is, at some
    # limit, the one refused (the default run a sample; ``-m slow`` all).
    for args in subcommands:
        for limit in limits:
            done = inspect(root, args, limit=limit, output=tmp_path / "t.svg")
            assert "Traceback" not in done.stderr, (args, limit, done.stderr)
            if done.returncode in (0, 1):
                seen.add("answered")
                continue
            assert done.returncode == 2, (args, limit, done.stderr)
            line = done.stderr.strip()
            assert "\n" not in line, (args, limit, line)
            if "Too many open files" in line:
                seen.add("refused")
                assert "ulimit -n" in line, line
    assert seen == {"answered", "refused"}
    # Nothing was changed by any of them.
    assert verify(root / JOURNAL_NAME).ok


def test_a_reader_killed_while_it_reads_leaves_the_journal_as_it_was(
    root: Path, neighbour: Neighbour,
) -> None:
    busy_root(root, neighbour)
    before = segment_files(root)
    for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
        for args in (["verify"], ["timeline", "-o", os.devnull], ["summary"]):
            reader = subprocess.Popen([str(JOURNAL_INSPECT), "--root", str(root), *args],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            reader.send_signal(signal.SIGKILL)
            reader.wait()
    # The journal is as it was, and the next manager and reader use it as ever.
    assert segment_files(root) == before
    assert verify(root / JOURNAL_NAME).ok
    with Manager(root) as manager:
        manager.retain()
        manager.acquire().release()
    assert inspect(root, ["verify"]).returncode == 0


def test_events_followed_across_rollovers_and_retirements_come_once_each_in_order(
    root: Path, neighbour: Neighbour,
) -> None:
    busy_root(root, neighbour, rounds=1)
    seen: list[int] = []
    stop = threading.Event()
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            for row in events(root / JOURNAL_NAME, follow=True, poll=0.01,
                              stop=stop.is_set):
                # Retired only once read past: nothing may be missed.
                assert isinstance(row, EventRow), row
                seen.append(row.seq)
        except BaseException as e:
            failed.append(e)

    follower = threading.Thread(target=follow)
    follower.start()
    rolled = 0
    try:
        with Manager(root, durability="relaxed") as manager:
            manager.retain()
            for i in range(30):
                for _ in range(3):
                    manager.acquire().release()
                # A rollover retiring nothing, then (once the follower has read
                # past it) the retirement of what it sealed.
                neighbour.seal(root)
                rolled += 1
                target = verify(root / JOURNAL_NAME).events
                deadline = time.monotonic() + 30
                while (not seen or seen[-1] < target) and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert seen, failed
                assert seen[-1] >= target, (seen[-3:], target, failed)
                if i % 3 == 2:
                    neighbour.move("retire", root)
    finally:
        stop.set()
        follower.join()
    assert failed == []
    assert rolled == 30
    assert neighbour.retired > 0
    # Every event once, in order, none skipped, whatever was sealed or retired.
    assert seen == list(range(seen[0], seen[0] + len(seen)))
