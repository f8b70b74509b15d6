"""Where the kept history starts: a segment's base and its first checkpoint agree.

Once history is retired, event 1 is gone and every reader of what is kept
(a recovery's restore, ``verify``, ``state --at``, ``timeline``,
``explain``, ``fsck``) starts from the state at the last event retired,
which the first kept segment holds as its first content.  That holds only
if a rollover's new segment starts with the state at its base: a rollover
made at a checkpoint one event behind the tail (another process appended
between the replay and the checkpoint, as a long-lived manager does beside
its own maintenance thread) must roll over at the true tail with the state
there, and a retirement may cut history only where a kept segment starts
with such a checkpoint.

The processes are real: the rollover is a maintenance pass in a neighbour
process (``tests/faultchild.py``) paused just before its checkpoint while
a manager here appends; the retirement a recovery pass there.  What every
reader says is compared with a full copy of the journal taken before
anything was retired, replayed from event 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiontemp import Manager
from sessiontemp.inspect import explain, fsck, state_at, timeline, verify
from sessiontemp.journal import State, Store, checkpoint
from sessiontemp.journal.reducer import Fold
from tests import zygote
from tests.model import SCRATCH
from tests.test_faults import Child, child

JOURNAL = "journal.sqlite3"


@pytest.fixture
def neighbour() -> Iterator[Child]:
    with child("neighbour", "-") as other:
        other.read("starting")
        yield other


def copy_journal(root: Path, to: Path) -> Path:
    """A copy of *root*'s journal files (head, -wal, segments), as they are now.

    Copied by another process: closing a descriptor of a file drops every
    POSIX lock the closing process holds on it, SQLite's on the live
    journal's -shm included, and another process's last close would then
    delete a -shm still in use here.
    """
    to.mkdir()
    names = [n for n in (JOURNAL, f"{JOURNAL}-wal", f"{JOURNAL}.d") if (root / n).exists()]
    subprocess.run(["cp", "-a", *(str(root / n) for n in names), str(to)], check=True)
    return to / JOURNAL


def states_by_seq(full: Path, journal: Path) -> dict[int, State]:
    """The live state after every event: *full* (a copy) from event 1, then *journal* on."""
    fold = Fold()
    states = {}
    for path in (full, journal):
        # The copy is opened for writing: SQLite then makes its own -shm.
        store = Store(path, readonly=path != full)
        try:
            for record in store.records(after=fold.seq):
                fold.step(record)
                states[record.seq] = fold.state()
        finally:
            store.close()
    return states


def busy(manager: Manager, leases: int) -> list[str]:
    """*leases* leases on *manager*, a rotation every third; the generations they had."""
    made = []
    for i in range(leases):
        with manager.acquire() as lease:
            made.append(lease.generation)
        if i % 3 == 2:
            manager.rotate()
    return made


def assert_every_reader_starts_where_history_starts(root: Path, full: Path) -> None:
    """Every reader of the kept history agrees with a full replay of *full* (a copy)."""
    journal = root / JOURNAL
    store = Store(journal, readonly=True)
    try:
        history = store.history()
        origin = checkpoint.origin(store)
        last = store.last_seq()
    finally:
        store.close()
    assert history.retired_until, "nothing was retired: the test did not reach its case"
    expected = states_by_seq(full, journal)
    assert origin.state == expected[history.retired_until], (
        f"no usable checkpoint of event {history.retired_until}, where the kept history starts")
    checked = verify(journal)
    assert checked.problems == (), checked.problems[:5]
    ran = zygote.journal_inspect(journal, "verify")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for seq in range(history.retired_until, last + 1, 7):
        seen = state_at(journal, seq, live=True)
        assert seen.refused == ()
        assert seen.state == expected[seq], f"state --live --at {seq} differs"
        assert state_at(journal, seq).refused == (), f"state --at {seq} refused records"
    drawn = timeline(journal)
    assert drawn.refused == (), f"the timeline refused {len(drawn.refused)} records"
    for generation in expected[last].generations:
        story = explain(journal, generation)
        assert story.status != "unknown", f"explain does not know {generation}"
        assert not any("stray" in said.text for said in story.sentences), (
            f"explain called {generation} a stray")
    assert fsck(root).ok


def test_a_rollover_one_event_behind_the_tail_starts_its_segment_with_the_state_at_the_tail(
    root: Path, tmp_path: Path, neighbour: Child,
) -> None:
    with Manager(root) as manager:
        manager.retain()
        busy(manager, 12)
        neighbour.tell("maintain", str(root), "pause")
        assert "paused" in neighbour.read("pausing before the checkpoint")
        # Appended between the maintenance's replay and its checkpoint.
        busy(manager, 2)
        # Every event there will be before the rollover (the pass holds no
        # write lock yet): replayed from event 1, what every reader must agree with.
        full = copy_journal(root, tmp_path / "full")
        neighbour.tell("go")
        done = neighbour.read("rolling over")
        assert "error" not in done, done
        assert len(done["after"]) == 1, done
        store = Store(root / JOURNAL, readonly=True)
        try:
            base = store.segments()[-1].base
            assert base == manager.state.seq, "the rollover was not made at the tail"
            assert checkpoint.restore(store, until=base).checkpoint == base
        finally:
            store.close()
        # Enough for a recovery pass to write a checkpoint, which covers the
        # segment rolled over from; then that one is retired.
        busy(manager, 60)
        report = neighbour.ask("retire", str(root))
        assert "error" not in report, report
        busy(manager, 3)
        assert_every_reader_starts_where_history_starts(root, full)
    assert_every_reader_starts_where_history_starts(root, full)


# -- the audit's case: a long-lived manager, the default retention --------------------------

AUDIT_EVENTS = 300_000


@pytest.mark.slow
def test_a_long_lived_manager_with_the_default_retention_keeps_a_history_every_reader_starts(
    tmp_path: Path,
) -> None:
    """About 300,000 events from one manager whose maintenance (a thread of its own, every
    20,000 events) checkpoints, rolls over at 2 MiB and retires beyond 16 MiB while the
    manager appends: every rollover is made while appends go on beside it."""
    base = Path(SCRATCH) if SCRATCH else tmp_path
    root = base / f"audit-{os.getpid()}" / "root"
    try:
        with Manager(root, durability="relaxed") as manager:
            manager.retain()
            while manager.state.seq < AUDIT_EVENTS:
                for _ in range(50):
                    manager.acquire().release()
                manager.rotate()
            live = sorted(g for g in manager.state.generations)
        store = Store(root / JOURNAL, readonly=True)
        try:
            history = store.history()
            kept = store.segments()
        finally:
            store.close()
        assert history.retired_until, "nothing was retired: the audit's case was not reached"
        print(f"\n{AUDIT_EVENTS:,} events: {len(kept)} segments kept, history from event "
              f"{history.retired_until + 1:,}")
        checked = verify(root / JOURNAL)
        assert checked.problems == (), (len(checked.problems), checked.problems[:3])
        at = state_at(root / JOURNAL, history.retired_until + 1, live=True)
        assert at.refused == ()
        drawn = timeline(root / JOURNAL)
        assert drawn.refused == (), f"the timeline refused {len(drawn.refused)} records"
        for generation in live:
            story = explain(root / JOURNAL, generation)
            assert not any("stray" in said.text for said in story.sentences)
        assert fsck(root).ok
    finally:
        shutil.rmtree(root.parent, ignore_errors=True)
