"""A manager meets another process's rollover, retirement and maintenance, and a busy journal.

The journal is several files once it rolls over, and any process may roll it
over and retire (delete) the segments behind it while a manager in another
process lives on with a connection to one of them.  These tests pin what
that manager must still do, with real processes on real files: a neighbour
process (``tests/faultchild.py`` in ``neighbour`` mode, forked from the
zygote) checkpoints, rolls over and retires everything it may
(``Retention(0, 0, 0)``), or holds the journal's write lock past the
manager's ``busy_timeout``, and then the manager carries on:

- its next sequence number never comes from a view that reads 0 once the
  segment it wrote to is retired and the new one has no event yet (the
  wedge in which every call said "event 1 follows event N: out of order");
- a close that cannot be journaled gives up every lock, raises no
  RuleViolation, and leaves the liveness lock file for the next recovery;
- memory, journal and disk agree, verify and fsck are clean.

A full disk reaches the same states: a 2 MiB tmpfs filled to within N pages
while a manager rotates, acquires and releases on a journal that rolls over
at every checkpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessiontemp import Lease, Manager, Unavailable, handles
from sessiontemp._guards.steps import Steps
from sessiontemp._kernel.root import Root
from sessiontemp.inspect import fsck, verify
from sessiontemp.journal import Retention, Store, testing
from sessiontemp.journal.errors import JournalBusy, JournalError, RuleViolation
from sessiontemp.recovery.passes import maintain
from tests.conftest import live_state, own_view
from tests.faults import Faults, Injected, raising
from tests.neighbour import Neighbour, deleted_descriptors, holding_the_journal
from tests.test_bad_journal import small_file_system
from tests.test_faults import Child, child, fill_leaving

JOURNAL = "journal.sqlite3"
# Short, so that a lock held past it fails an append at once.
BUSY = 0.3
# Every checkpoint starts a new segment; every sealed one is deleted once covered.
EAGER = Retention(segment_bytes=0, history_bytes=0, history_age=0)


@pytest.fixture
def neighbour() -> Iterator[Child]:
    """Another process: ``maintain``, ``hold`` / ``let-go``, ``open`` and ``recover`` a root."""
    with child("neighbour", "-") as other:
        other.read("starting")
        yield other


def segment_files(root: Path) -> list[str]:
    folder = root / f"{JOURNAL}.d"
    names = os.listdir(folder) if folder.exists() else []
    return sorted(n for n in names if n.endswith(".sqlite3"))


def retired_everything(neighbour: Child, root: Path) -> dict[str, object]:
    """The neighbour rolls the journal over and retires every segment before the new one."""
    done = neighbour.ask("maintain", str(root))
    assert "error" not in done, done
    assert done["after"] != done["before"], f"no rollover: {done}"
    assert len(done["after"]) == 1, f"a sealed segment was kept: {done}"
    return done


def flock_free(path: Path) -> bool:
    """Whether nobody holds any flock on *path* (an exclusive probe succeeds)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def assert_holds_nothing(manager: Manager, directories: list[Path]) -> None:
    """*manager* gave up every lock: the root's, its liveness lock's, each directory's."""
    root = manager.root
    assert manager.closed
    assert flock_free(root), "the root's shared lock is still held"
    lock_file = root / "managers" / f"{manager.id}.lock"
    if lock_file.exists():
        assert flock_free(lock_file), "the liveness lock is still held"
    for directory in directories:
        if directory.exists():
            assert flock_free(directory), f"{directory} is still locked"


def assert_agrees(manager: Manager) -> None:
    assert own_view(live_state(manager.root), manager.id) == own_view(
        manager.state, manager.id), "the manager's memory is not the journal"


def assert_clean(root: Path) -> None:
    """``journal-inspect verify`` and ``fsck``, as the library gives them, find nothing."""
    checked = verify(root / JOURNAL)
    assert checked.problems == (), checked.problems[:5]
    report = fsck(root)
    assert report.ok, report.findings[:5]


def with_history(manager: Manager, leases: int = 5) -> None:
    manager.retain()
    for _ in range(leases):
        with manager.acquire() as lease:
            (lease.path / "f").write_text("x")
    manager.rotate()


@contextlib.contextmanager
def held_by(neighbour: Child, root: Path) -> Iterator[None]:
    """The neighbour holds the active segment's write lock for the block."""
    assert "holding" in neighbour.ask("hold", str(root))
    try:
        yield
    finally:
        neighbour.ask("let-go")


# -- item: a failed append, then another process's rollover and retirement -------------------


def test_a_manager_whose_append_failed_busy_keeps_working_after_another_process_retires_its_segment(
    root: Path, neighbour: Child,
) -> None:
    manager = Manager(root, busy_timeout=BUSY)
    try:
        with_history(manager)
        with held_by(neighbour, root), pytest.raises(Unavailable) as caught:
            manager.acquire()
        assert isinstance(caught.value.__cause__, JournalBusy)
        assert_agrees(manager)
        retired_everything(neighbour, root)
        # The segment this manager wrote to is gone, the new one has no event.
        for _ in range(3):
            with manager.acquire() as lease:
                (lease.path / "g").write_text("y")
            manager.rotate()
            assert_agrees(manager)
        manager.retain()
        manager.release()
        assert_agrees(manager)
    except BaseException:
        with contextlib.suppress(Exception):
            manager.close()
        raise
    manager.close()
    assert_holds_nothing(manager, [])
    assert not (root / "managers" / f"{manager.id}.lock").exists()
    assert live_state(root).managers.get(manager.id) is None, "its close was not journaled"
    assert_clean(root)


@pytest.mark.parametrize("first", ["retain", "rotate", "acquire", "release", "close"])
def test_the_first_call_after_a_busy_failure_and_a_retirement_elsewhere_is_journaled_in_order(
    root: Path, neighbour: Child, first: str,
) -> None:
    manager = Manager(root, busy_timeout=BUSY)
    try:
        with_history(manager)
        directory = manager.acquire().path
        with held_by(neighbour, root), pytest.raises(JournalError):
            manager.rotate()
        retired_everything(neighbour, root)
        if first == "acquire":
            manager.acquire().release()
        else:
            getattr(manager, first)()
        if first != "close":
            assert_agrees(manager)
            manager.close()
    except BaseException:
        with contextlib.suppress(Exception):
            manager.close()
        raise
    assert_holds_nothing(manager, [directory])
    assert live_state(root).managers.get(manager.id) is None, "its close was not journaled"
    neighbour.ask("recover", str(root))
    assert_clean(root)
    assert not directory.exists()


def test_a_close_that_cannot_be_journaled_gives_up_every_lock_after_a_retirement_elsewhere(
    root: Path, neighbour: Child,
) -> None:
    manager = Manager(root, busy_timeout=BUSY)
    lease = None
    try:
        with_history(manager)
        lease = manager.acquire()
        with held_by(neighbour, root), pytest.raises(Unavailable):
            manager.acquire()
        retired_everything(neighbour, root)
        with held_by(neighbour, root):
            manager.close()
    except BaseException:
        with contextlib.suppress(Exception):
            manager.close()
        raise
    directory = lease.path
    assert_holds_nothing(manager, [directory])
    assert (root / "managers" / f"{manager.id}.lock").exists(), (
        "the liveness lock file went although the end was not journaled")
    report = neighbour.ask("recover", str(root))
    assert report["dead"] == [manager.id]
    assert not directory.exists()
    assert_clean(root)


@pytest.mark.parametrize("error", [RuleViolation(1, "follows event 2: out of order"),
                                   Injected("at the close's journal step")],
                         ids=["rule-violation", "exception"])
def test_a_close_whose_end_is_refused_gives_up_every_lock_and_leaves_its_lock_file(
    root: Path, neighbour: Child, error: Exception,
) -> None:
    faults = Faults()
    manager = Manager(root, busy_timeout=BUSY, step_hook=faults)
    with_history(manager)
    lease = manager.acquire()
    faults.arm(raising(error), only="journal")
    try:
        if isinstance(error, RuleViolation):
            manager.close()
        else:
            with pytest.raises(Injected):
                manager.close()
    finally:
        faults.disarm()
    assert_holds_nothing(manager, [lease.path])
    assert (root / "managers" / f"{manager.id}.lock").exists()
    report = neighbour.ask("recover", str(root))
    assert report["dead"] == [manager.id]
    assert not lease.path.exists()
    assert_clean(root)


# -- item: retired segments' descriptors ------------------------------------------------------


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic garbage collector off: what is let go must be closed, not collected."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def maintain_here(root: Path) -> None:
    """In this process: checkpoint, roll over and retire everything, as faultchild's neighbour."""
    opened = Root.open(root)
    try:
        store = Store(opened.journal_path, retention=EAGER)
        try:
            store.maintenance_every = 0
            maintain(opened, store, clock=time.time, steps=Steps(None))
        finally:
            store.close()
    finally:
        opened.close()


def test_segments_retired_by_another_process_leave_no_descriptor_open_here(
    root: Path, neighbour: Child, no_collector: None,
) -> None:
    busy = Manager(root)
    reader = Store(root / JOURNAL, readonly=True)
    idle: Manager | None = None
    try:
        busy.retain()
        for round in range(6):
            if round == 3:
                # Its connection is on the segment retired next: it lets go
                # of it at its next look, which comes only after the loop.
                idle = Manager(root)
            with_history(busy, 3)
            assert len(list(reader.records(after=reader.last_seq() - 3))) == 3
            retired_everything(neighbour, root)
            # The next look of each: an operation, a read.
            with busy.acquire():
                pass
            assert reader.last_seq() == busy.state.seq
            assert list(reader.records(after=busy.state.seq - 1))
            assert reader.history().retired_until
            if idle is None:
                assert deleted_descriptors(root) == [], f"round {round}"
        assert idle is not None
        idle.retain()
        assert deleted_descriptors(root) == [], "the idle manager's next look kept them"
    finally:
        reader.close()
        busy.close()
        if idle is not None:
            idle.close()
    assert deleted_descriptors(root) == []
    assert_clean(root)


def test_segments_retired_by_this_process_are_closed_when_retired(
    root: Path, no_collector: None,
) -> None:
    with Manager(root, retention=EAGER) as manager:
        manager.retain()
        for _ in range(6):
            with_history(manager, 3)
            maintain_here(root)
            assert deleted_descriptors(root) == []
            with manager.acquire():
                pass
            assert deleted_descriptors(root) == []
    assert deleted_descriptors(root) == []
    assert_clean(root)


def test_a_long_lived_managers_own_maintenance_leaves_no_descriptor_to_a_retired_segment(
    root: Path, no_collector: None,
) -> None:
    with Manager(root, retention=EAGER) as manager:
        store = handles.of(manager.id).store
        assert store is not None
        store.maintenance_every = 25
        manager.retain()
        for _ in range(8):
            with_history(manager, 12)
            running = testing.maintenance_thread(store)
            if running is not None:
                running.join()
            assert deleted_descriptors(root) == []
        assert segment_files(root), "the maintenance never rolled over"
    assert deleted_descriptors(root) == []
    assert_clean(root)


# -- the same through a full disk -------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    with small_file_system(tmp_path, "2m") as fs:
        yield fs


def work(manager: Manager, leases: list[Lease]) -> list[Exception]:
    """Rotate, acquire and release as a session does; the errors a full disk gave."""
    errors: list[Exception] = []
    for step in ("rotate", "acquire", "acquire", "release", "rotate", "release"):
        try:
            if step == "rotate":
                manager.rotate()
            elif step == "acquire":
                leases.append(manager.acquire())
            elif leases:
                leases.pop(0).release()
        except (JournalError, Unavailable) as e:
            errors.append(e)
    return errors


@pytest.mark.parametrize("rounds", [pytest.param(1, id="each-level-once"),
                                    pytest.param(15, id="each-level-15-times",
                                                 marks=pytest.mark.slow)])
def test_fill_work_free_rounds_with_rollovers_on_a_nearly_full_disk_leave_the_manager_working(
    full_disk: Path, neighbour: Child, rounds: int,
) -> None:
    root = full_disk / "root"
    manager = Manager(root, busy_timeout=10.0, retention=EAGER)
    leases: list[Lease] = []
    hit = rolled = 0
    try:
        manager.retain()
        for level in [pages for pages in range(21) for _ in range(rounds)]:
            at = f"with {level} pages free"
            filler = fill_leaving(full_disk, level)
            try:
                hit += bool(work(manager, leases))
                # Another process rolls over and retires on the nearly full
                # disk (a failure there only delays the journal's bound).
                neighbour.ask("maintain", str(root))
            finally:
                filler.unlink()
            # Space is back: another rollover and retirement, then the same
            # manager must work as ever, its memory the journal's.
            done = neighbour.ask("maintain", str(root))
            assert "refused" not in done, f"{at}: {done}"
            rolled += done["after"] != done["before"]
            assert not manager.closed, f"{at}: the manager gave up"
            assert work(manager, leases) == [], at
            assert_agrees(manager)
            assert_clean(root)
        for lease in leases:
            lease.release()
    except BaseException:
        with contextlib.suppress(Exception):
            manager.close()
        raise
    manager.close()
    assert_holds_nothing(manager, [])
    assert not (root / "managers" / f"{manager.id}.lock").exists()
    assert_clean(root)
    # The fault was reached: at some levels the disk refused the work; and
    # the journal rolled over after it.
    assert hit
    assert rolled


def journal_descriptors(root: Path) -> list[str]:
    """This process's descriptors to *root*'s journal files, deleted or not."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{root}/{JOURNAL}"):
                found.append(target)
    return found


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_close_that_meets_a_busy_journal_keeps_no_journal_file_open_once_it_returns(
    root: Path, no_collector: None, at: int,
) -> None:
    """Its end journaled or not, the removals after it refused: nothing of the journal stays open.

    The busy error sits in a reference cycle (its traceback's frames hold
    the append that failed, which holds the error) that only the garbage
    collector breaks: a cursor among those frames kept its statement, and
    so the closed connection's files and its lock on the -shm, open.
    """
    other = Neighbour()
    faults = Faults()
    manager = Manager(root, busy_timeout=BUSY, step_hook=faults)
    try:
        manager.retain()
        manager.acquire()
        manager.rotate()
        manager.acquire()
        faults.arm(holding_the_journal(other, root), at=at)
        try:
            manager.close()
        finally:
            faults.disarm()
            other.let_go()
        # Nothing else in this process has the journal open.
        assert journal_descriptors(root) == []
        assert_holds_nothing(manager, [])
        other.ask("recover", str(root))
        assert_clean(root)
    finally:
        other.end()
