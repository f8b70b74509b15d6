"""Faults a process lives through: memory, journal and disk agree, and the root stays usable.

The crash tests kill the process; these let it live on through the fault,
with real faults and real processes: a small tmpfs filled to within N pages
around every operation, hundreds of SIGINTs against a loop that catches
KeyboardInterrupt (``tests/faultchild.py``), SIGINT and SIGTERM sent by
another process to one whose SIGTERM handler raises, a fork inside ``with
Manager(...)`` whose child leaves the block, a close() that cannot journal
(full disk, or another process holding the journal's write lock past
busy_timeout), and refused journals in a program that configures nothing.

After each one, :func:`assert_sound` holds: the manager's state is a replay
of the journal, ``Store.verify()`` is clean, every row committed before
the fault is still there, and another process opens the root.  Once every
holder is gone and a recovery has run, nothing is left: no generation, no
trash, no liveness lock file.  The fork and failed-close tests, and the
full-disk sweep, also run a planted variant of the old bug and show that
their checks catch it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sessiontemp import (
    GENERATION_PREFIX,
    TRASH_PREFIX,
    Lease,
    LowDisk,
    Manager,
    Unavailable,
    recover,
)
from sessiontemp._kernel.root import RESERVE, generation_name
from sessiontemp.journal import Record, replay
from sessiontemp.journal.errors import JournalError, JournalFull
from sessiontemp.writer import Writer
from tests import zygote
from tests.childio import CutShort, JsonLines
from tests.conftest import journal_state, live_state, locked_by_another, own_view
from tests.test_bad_journal import (
    append_unknown_kind,
    committed,
    damage_a_data_page,
    fill,
    lock_held_by_another_process,
    small_file_system,
    verify,
    with_history,
)

CHILD = Path(__file__).with_name("faultchild.py")
PAGE = 4096
# The longest any one answer of a child may take before the test fails.
TIMEOUT = 60.0
# Fill levels: free pages left on the file system when the operation runs.
LEVELS = range(21)


# -- processes ---------------------------------------------------------------------


class Child:
    """One faultchild process and the line-by-line conversation with it."""

    def __init__(self, *args: str) -> None:
        # Forked from a process that has imported the library (tests/zygote.py), as a new
        # `python tests/faultchild.py` would run, without its half second of start-up.
        self.proc = zygote.shared("sessiontemp", "tests.childio").start(CHILD, list(args))
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self._lines = JsonLines(self.proc.stdout.fileno())

    def fail(self, message: str) -> None:
        self.proc.kill()
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read().decode(errors="replace")[-4000:]
        pytest.fail(f"faultchild {self.proc.pid}: {message}\n--- its stderr ---\n{stderr}")

    def read(self, doing: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The next JSON line; fails at end of file or after *timeout* seconds."""
        try:
            message = self._lines.read(timeout)
        except (TimeoutError, CutShort) as e:
            self.fail(f"{e} while {doing}")
            raise AssertionError from e  # unreachable: fail raises
        if message is None:
            self.fail(f"ended while {doing}")
            raise AssertionError  # unreachable: fail raises
        if "error" in message and "traceback" in message:
            self.fail(f"{message['error']} while {doing}\n{message['traceback']}")
        return message

    def tell(self, *words: str) -> None:
        """One command line, without waiting for an answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((" ".join(words) + "\n").encode())
        self.proc.stdin.flush()

    def ask(self, *words: str) -> dict[str, Any]:
        self.tell(*words)
        return self.read(" ".join(words))

    def wait(self) -> int:
        """End of its input, then its exit status."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"still running {TIMEOUT} s after its input ended")
            raise

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def child(*args: str) -> Iterator[Child]:
    started = Child(*args)
    try:
        yield started
    finally:
        started.end()


@pytest.fixture
def neighbour() -> Iterator[Child]:
    """Another process that opens roots (``open PATH``) and recovers them (``recover PATH``)."""
    with child("neighbour", "-") as other:
        other.read("starting")
        yield other


# -- what must hold after a fault -----------------------------------------------------


def names(root: Path, prefix: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(prefix))


def assert_agrees(manager: Manager, at: str) -> None:
    """What the manager holds of its own is exactly the journal's replay."""
    assert own_view(live_state(manager.root), manager.id) == own_view(
        manager.state, manager.id
    ), f"{at}: the manager's state is not the journal's"


def assert_journal_matches_disk(root: Path, at: str) -> None:
    """The generations the journal keeps are exactly those on disk, and no removal is half done."""
    state = journal_state(root)
    kept = {generation_name(g.id) for g in state.generations.values()
            if g.removal != "finished"}
    assert names(root, TRASH_PREFIX) == [], f"{at}: a removal was left half done"
    assert set(names(root, GENERATION_PREFIX)) == kept, f"{at}: the disk is not the journal's"


def assert_sound(root: Path, before: list[Any], at: str) -> None:
    """The chain verifies and every row committed before the fault is still there."""
    assert verify(root) == [], f"{at}: the journal does not verify"
    rows = committed(root)
    assert rows[:len(before)] == before, f"{at}: a row committed before the fault was lost"


def assert_nothing_left(root: Path, at: str) -> None:
    """Every holder gone and recovered: no generation, no trash, no liveness lock, all ended."""
    assert names(root, GENERATION_PREFIX) == [], f"{at}: generations left behind"
    assert names(root, TRASH_PREFIX) == [], f"{at}: trash left behind"
    assert os.listdir(root / "managers") == [], f"{at}: liveness lock files left behind"
    state = journal_state(root)
    assert all(m.ended is not None for m in state.managers.values()), f"{at}: a manager lives on"
    assert all(g.removal == "finished" for g in state.generations.values()), (
        f"{at}: the journal keeps a generation"
    )


def opened_elsewhere(neighbour: Child, root: Path, at: str) -> dict[str, Any]:
    """Another process opens (and closes) a manager on *root*: its recovery report."""
    report = neighbour.ask("open", str(root))
    assert "error" not in report, f"{at}: another process could not open the root: {report}"
    assert report["ran"]
    return report


# -- a full file system, at every fill level, around every operation ---------------------


def free_pages(fs: Path) -> int:
    return os.statvfs(fs).f_bfree


def fill_leaving(fs: Path, pages: int) -> Path:
    """Fill the file system *fs* so that exactly *pages* pages are free; returns the filler.

    The reserve of every root on it is spent first (as another manager's
    removal would have spent it): these sweeps are of a disk with no room
    at all, where every commit fails; tests/test_space.py shows what the
    reserve saves.
    """
    for reserve in fs.glob(f"*/{RESERVE}"):
        os.truncate(reserve, 0)
    filler = fill(fs)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - pages * PAGE))
    assert free_pages(fs) == pages, "the file system could not be filled to the page"
    return filler


OPERATIONS = ("acquire on a fresh root", "acquire on a live generation", "rotate then acquire",
              "a lease release that removes a retired generation", "close")


def prepare(manager: Manager, operation: str) -> Lease | None:
    """Bring *manager* to where *operation* starts; returns a lease it must keep, if any."""
    manager.retain()
    if operation in ("acquire on a live generation", "close"):
        with manager.acquire() as lease:
            (lease.path / "kept").write_bytes(b"k" * 100)
    if operation in ("a lease release that removes a retired generation", "close"):
        held = manager.acquire()
        (held.path / "held").write_bytes(b"h" * 100)
        manager.rotate()
        if operation == "a lease release that removes a retired generation":
            return held
    return None


def operate(manager: Manager, operation: str, held: Lease | None) -> list[Exception]:
    """Run *operation*; the errors it raised that its callers are told to expect.

    An acquire is tried three times, as a caller retrying would: the first
    failure can leave work half done (a directory made, never journaled
    ready) that the next attempt must deal with.
    """
    errors: list[Exception] = []
    if operation == "rotate then acquire":
        try:
            manager.rotate()
        except JournalError as e:
            errors.append(e)
    for _ in range(3 if operation.startswith(("acquire", "rotate")) else 1):
        try:
            if operation.startswith(("acquire", "rotate")):
                with manager.acquire() as lease:
                    (lease.path / "during").write_bytes(b"")
            elif operation == "close":
                manager.close()
            else:
                assert held is not None
                held.release()
        except (Unavailable, JournalError) as e:
            errors.append(e)
    return errors


def assert_blames_the_full_disk(error: BaseException, at: str) -> None:
    """The error says what happened, so that its fix is the right one: free space."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__
    # LowDisk: refused before anything was written, the free space named.
    assert any(isinstance(e, (JournalFull, LowDisk)) or (
        isinstance(e, OSError) and e.errno == errno.ENOSPC) for e in chain), (
        f"{at}: a full disk reported as {error!r}")


def survive_a_full_disk(
    fs: Path, neighbour: Child, operation: str, pages: int,
    manager_class: type[Manager] = Manager,
) -> bool:
    """One operation with *pages* pages free, then space freed; whether the fault hit it."""
    at = f"{operation} with {pages} pages free"
    root = fs / f"root-{OPERATIONS.index(operation)}-{pages}"
    # No floor: the sweep is of the journal's own failures at every fill
    # level, which a LowDisk refusal would otherwise pre-empt below 1%.
    manager = manager_class(root, busy_timeout=TIMEOUT, min_free_bytes=0)
    try:
        held = prepare(manager, operation)
        before = committed(root)
        filler = fill_leaving(fs, pages)
        try:
            with capture_logs() as logs:
                errors = operate(manager, operation, held)
            assert_agrees(manager, at)
            # Neither is allowed to raise: a failure is logged and left for later.
            if operation.startswith(("a lease release", "close")):
                assert errors == [], f"{at}: raised {errors!r}"
            for error in errors:
                assert_blames_the_full_disk(error, at)
            assert_sound(root, before, at)
        finally:
            filler.unlink()
        close_failed = any(e["event"] == "manager.close_failed" for e in logs)
        if operation != "close":
            # Space is back: the same manager works again, and what a
            # failure left (a removal due, a half-made directory) is done.
            assert not manager.closed, f"{at}: the manager gave up"
            if held is not None:
                held.release()
            with manager.acquire() as lease:
                (lease.path / "after").write_bytes(b"a" * 100)
            assert_agrees(manager, at)
            assert_journal_matches_disk(root, at)
            if held is not None:
                assert not (root / generation_name(held.generation)).exists(), (
                    f"{at}: the retired generation outlived its last lease"
                )
        report = opened_elsewhere(neighbour, root, at)
        assert report["dead"] == ([manager.id] if close_failed else []), at
        assert report["skipped"] == [], at
        if operation != "close":
            assert_agrees(manager, at)
    except BaseException:
        # The failure is the news, not whatever a close of a manager in
        # that state says next.
        with contextlib.suppress(Exception):
            manager.close()
        raise
    manager.close()
    recovered = neighbour.ask("recover", str(root))
    assert recovered["skipped"] == [], at
    assert_nothing_left(root, at)
    assert_sound(root, before, at)
    shutil.rmtree(root)
    return bool(errors) or any(e["log_level"] in ("warning", "error") for e in logs)


def sweep(fs: Path, neighbour: Child, operation: str,
          manager_class: type[Manager] = Manager) -> list[int]:
    """*operation* at every fill level; the levels at which the fault hit it."""
    return [pages for pages in LEVELS
            if survive_a_full_disk(fs, neighbour, operation, pages, manager_class)]


def test_a_fresh_root_on_a_full_disk_is_refused_as_full_and_opens_once_space_is_freed(
    full_disk: Path, neighbour: Child
) -> None:
    for pages in LEVELS:
        at = f"opening a fresh root with {pages} pages free"
        root = full_disk / f"fresh-{pages}"
        filler = fill_leaving(full_disk, pages)
        try:
            with Manager(root, busy_timeout=TIMEOUT) as manager:
                manager.retain()
                with manager.acquire():
                    pass
        except (JournalError, Unavailable) as e:
            assert_blames_the_full_disk(e, at)
        finally:
            filler.unlink()
        opened_elsewhere(neighbour, root, at)
        neighbour.ask("recover", str(root))
        assert_nothing_left(root, at)
        assert verify(root) == []
        shutil.rmtree(root)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    with small_file_system(tmp_path, "2m") as fs:
        yield fs


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_full_disk_at_every_fill_level_leaves_memory_journal_and_disk_agreeing(
    full_disk: Path, neighbour: Child, operation: str
) -> None:
    hit = sweep(full_disk, neighbour, operation)
    # The sweep reached the fault: with no page free, the operation failed.
    assert 0 in hit


def test_an_acquire_refused_for_a_half_made_directory_says_why_it_could_not_be_cleared(
    root: Path,
) -> None:
    # The full disk from the step hook, at the two appends that matter: the
    # directory is made, its ready event fails, and so does every attempt
    # to clear it, until space is back.
    full = {"on": False}

    def hook(kind: str, detail: str) -> None:
        if full["on"] and kind == "journal" and detail.startswith(
            ("generation.ready", "removal.started")
        ):
            raise JournalFull(root / "journal.sqlite3",
                              "could not append to it: the file system is full",
                              "Free space on it; nothing already committed was lost")

    at = "a half-made directory on a full disk"
    manager = Manager(root, step_hook=hook)
    try:
        manager.retain()
        full["on"] = True
        with pytest.raises(Unavailable, match="could not record the lease"):
            manager.acquire()
        with pytest.raises(Unavailable, match="left half made") as caught:
            manager.acquire()
        assert "the file system is full" in caught.value.reason
        assert_blames_the_full_disk(caught.value, at)
        assert_agrees(manager, at)
        full["on"] = False
        with manager.acquire():
            pass
        assert_journal_matches_disk(root, at)
    finally:
        manager.close()
    recover(root)
    assert_nothing_left(root, at)
    assert verify(root) == []


STEPS = ("acquire", "acquire", "rotate", "release a lease", "write", "retain", "release",
         "open another", "recover")


def many_operations_on_a_full_disk(fs: Path, neighbour: Child, pages: int) -> None:
    """A random run of operations with *pages* pages free, each checked; then space freed."""
    at = f"with {pages} pages free"
    rng = random.Random(pages)
    root = fs / f"many-{pages}"
    manager = Manager(root, busy_timeout=TIMEOUT)
    leases: list[Lease] = []
    try:
        manager.retain()
        for _ in range(3):
            leases.append(manager.acquire())
            (leases[-1].path / "data").write_bytes(b"d" * 3 * PAGE)
            manager.rotate()
        before = committed(root)
        filler = fill_leaving(fs, pages)
        try:
            for i in range(40):
                step = rng.choice(STEPS)
                try:
                    if step == "acquire":
                        leases.append(manager.acquire())
                    elif step == "rotate":
                        manager.rotate()
                    elif step == "release a lease" and leases:
                        leases.pop(rng.randrange(len(leases))).release()
                    elif step == "write" and leases:
                        with contextlib.suppress(OSError):  # the command's own ENOSPC
                            (leases[-1].path / f"w{i}").write_bytes(b"w" * rng.choice((9, PAGE)))
                    elif step == "retain":
                        manager.retain()
                    elif step == "release" and manager.owners > 1:
                        manager.release()
                    elif step == "open another":
                        with Manager(root, busy_timeout=TIMEOUT):
                            pass
                    elif step == "recover":
                        recover(root, busy_timeout=TIMEOUT)
                except (JournalError, Unavailable) as e:
                    assert_blames_the_full_disk(e, f"{step} {at}")
                assert_agrees(manager, f"{step} {at}")
                assert not manager.closed, f"{step} {at}: the manager gave up"
            assert_sound(root, before, at)
        finally:
            filler.unlink()
        for lease in leases:
            lease.release()
        with manager.acquire():
            pass
        assert_agrees(manager, at)
        assert_journal_matches_disk(root, at)
        assert opened_elsewhere(neighbour, root, at)["skipped"] == []
    except BaseException:
        with contextlib.suppress(Exception):
            manager.close()
        raise
    manager.close()
    neighbour.ask("recover", str(root))
    assert_nothing_left(root, at)
    assert_sound(root, before, at)
    shutil.rmtree(root)


@pytest.mark.slow
def test_many_operations_on_a_full_disk_at_every_fill_level_leave_memory_journal_and_disk_agreeing(
    full_disk: Path, neighbour: Child
) -> None:
    for pages in range(41):
        many_operations_on_a_full_disk(full_disk, neighbour, pages)


APPEND = Writer.append


def moves_its_state_before_the_commit(self: Writer, *events: Any, wait: bool = True) -> Any:
    """The old write path's fault: memory moves on although the journal refused the events."""
    start = self.state.seq
    ahead = replay([Record(start + i, 0.0, e) for i, e in enumerate(events, 1)], self.state)
    try:
        return APPEND(self, *events)
    except JournalError:
        self.state = ahead
        raise


def test_the_full_disk_sweep_finds_a_manager_whose_memory_runs_ahead_of_its_journal(
    full_disk: Path, neighbour: Child, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Writer, "append", moves_its_state_before_the_commit)
    with pytest.raises(AssertionError, match="the manager's state is not the journal's"):
        sweep(full_disk, neighbour, "acquire on a fresh root")


# -- a SIGINT storm against a process that carries on -----------------------------------

INTERRUPTS = 200


def send_from_here(pid: int, signals: tuple[signal.Signals, ...], count: int) -> None:
    """Send *count* signals to *pid*, taking turns through *signals*, 5 to 50 ms apart."""
    rng = random.Random(count)
    for i in range(count):
        time.sleep(rng.uniform(0.005, 0.05))
        os.kill(pid, signals[i % len(signals)])


def storm(root: Path, neighbour: Child, *options: str, interrupts: int = INTERRUPTS,
          outside: tuple[signal.Signals, ...] = (), patience: float = TIMEOUT
          ) -> dict[str, Any]:
    """A child process looping through a SIGINT storm; the counts it reports afterwards.

    The signals come from a thread of the child itself, or with *outside*
    from this process.  Its manager is checked while it still lives: its
    state is the journal's and the root holds exactly the directories it
    names, the journal verifies, no row committed before the storm is
    lost, and another process opens the root within a second.  Then it
    closes, and a recovery finds nothing left behind.
    """
    at = f"after {interrupts} interrupts"
    if outside:
        options = (*options, "--from-outside")
    with child("storm", str(root), "--interrupts", str(interrupts), *options) as looping:
        hello = looping.read("opening")
        manager = hello["manager"]
        before = committed(root)
        if outside:
            send_from_here(hello["pid"], outside, interrupts)
            looping.tell("calm", str(interrupts))
        counts = looping.read("storming", patience)
        assert counts["journal"] == "agrees", (
            f"{at}: the manager's state is not the journal's: {counts['journal']}"
        )
        assert counts["disk"] == "agrees", (
            f"{at}: the root's directories are not the manager's: {counts['disk']}"
        )
        assert counts["failures"] == [], f"{at}: operations failed: {counts['failures']}"
        assert counts["works"], f"{at}: the manager no longer works: {counts['error']}"
        assert not counts["closed"], f"{at}: the manager gave up"
        assert counts["sent"] == interrupts
        # It really was a storm inside the library: interrupts landed in the
        # middle of operations and were raised once each had finished.
        assert counts["deferred"] > 0, counts
        assert counts["rounds"] > 0, counts
        assert_sound(root, before, at)
        # A wedged connection would hold the journal's write lock: another
        # process must get through within a second while this one lives.
        report = neighbour.ask("open", str(root), "1.0")
        assert "error" not in report, f"{at}: another process could not open the root: {report}"
        assert report["dead"] == []
        assert report["skipped"] == []
        assert looping.ask("close") == {"closed": True}
        assert looping.wait() == 0
    assert journal_state(root).managers[manager].ended == "closed"
    neighbour.ask("recover", str(root))
    assert_nothing_left(root, at)
    assert_sound(root, before, at)
    return counts


def test_a_sigint_storm_against_a_process_that_carries_on_leaves_the_root_usable(
    root: Path, neighbour: Child, record_property: Callable[[str, object], None]
) -> None:
    counts = storm(root, neighbour)
    record_property("storm", counts)
    print(f"storm: {counts}")


@pytest.mark.slow
def test_the_storm_finds_operations_that_an_interrupt_can_cut(
    root: Path, neighbour: Child
) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception),
                       match=r"is not the journal's|operations failed|no answer"):
        # Without the shield, an interrupt cuts an operation somewhere in
        # the manager's code, or the process wedges: an interrupt left a
        # lock held, which the storm then finds by its silence.  The store
        # keeps a commit it interrupted after it landed, which was the
        # widest such window: a hundred interrupts then caught what is
        # left about half the time, a thousand every time (4 runs of 4,
        # some 30 s each).
        storm(root, neighbour, "--planted", interrupts=1000, patience=20.0)


def test_sigint_and_sigterm_from_another_process_during_operations_leave_the_root_usable(
    root: Path, neighbour: Child, record_property: Callable[[str, object], None]
) -> None:
    """The signals a terminal or a supervisor sends, with a SIGTERM handler that raises."""
    counts = storm(root, neighbour, outside=(signal.SIGINT, signal.SIGTERM))
    record_property("storm", counts)
    print(f"storm from outside: {counts}")


def test_the_outside_storm_finds_a_shield_that_defers_only_sigint(
    root: Path, neighbour: Child
) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception),
                       match=r"is not the journal's|operations failed|the root's directories|"
                       r"no answer"):
        # As unshielded operations are.  A hundred SIGTERMs found it in about
        # three runs of four on a busy machine, four hundred in every run.
        storm(root, neighbour, "--planted", interrupts=400, outside=(signal.SIGTERM,),
              patience=10.0)


# -- fork inside a with block -------------------------------------------------------------


def forked(root: Path, how: str, *options: str) -> dict[str, Any]:
    """Run the fork scenario in a child process; its messages by their first key."""
    with child("fork", str(root), "--exit", how, *options) as forking:
        messages = {"hello": forking.read("opening")}
        for doing in ("the child uses its copies", "the parent looks", "the parent carries on"):
            message = forking.read(doing)
            messages.update(message)
        assert forking.wait() == 0
    return messages


def assert_parent_unharmed(seen: dict[str, Any]) -> None:
    """What the parent found after its forked child left the block, and how it carried on."""
    after, parent, kid = seen["after_child"], seen["parent"], seen["child"]
    journaled = [kind for _, kind, _ in after["new_rows"]]
    assert journaled == [], f"the child journaled for its parent: {journaled}"
    assert not after["rows_changed"], "the child changed rows of the journal"
    assert after["lock_file"] == "held", (
        f"the parent's liveness lock file is {after['lock_file']} after the child left"
    )
    assert not after["lease_released_here"]
    assert after["journal"] == "agrees", f"the parent's state is not the journal's: {after}"
    assert after["status"] == 0
    # The child was told, naming both processes, and its release was its own.
    assert kid["acquire"] == "ForkedCopy", f"the child's acquire: {kid['acquire']}"
    assert str(kid["parent"]) in kid["message"]
    assert str(kid["pid"]) in kid["message"]
    assert kid["release"] == "returned"
    # The retired generation is held by the parent's lease alone: the
    # child's release of its copy did not let it go.
    assert parent["lease_lock_after_rotate"] == "held", "the child released the parent's lease"
    assert parent["failures"] == [], f"the parent's next operations failed: {parent['failures']}"
    assert parent["retired_removed_after_release"]
    assert parent["closed"]
    assert parent["lock_file_after_close"] == "missing"


@pytest.mark.parametrize("how", ["block", "sys.exit", "os._exit"])
def test_a_forked_child_leaving_the_with_block_leaves_its_parent_unharmed(
    root: Path, neighbour: Child, how: str
) -> None:
    seen = forked(root, how)
    assert_parent_unharmed(seen)
    at = f"after a fork whose child left by {how}"
    state = journal_state(root)
    manager = state.managers[seen["hello"]["manager"]]
    assert manager.ended == "closed"
    assert manager.ended_by == manager.id
    assert verify(root) == []
    rows = [[seq, kind, payload] for seq, _, kind, payload, _ in committed(root)]
    before = seen["hello"]["before_fork"]
    assert rows[:len(before)] == before, f"{at}: a row committed before the fork was lost"
    opened_elsewhere(neighbour, root, at)
    neighbour.ask("recover", str(root))
    assert_nothing_left(root, at)


def test_the_fork_test_finds_a_child_that_acts_for_its_parent(root: Path) -> None:
    seen = forked(root, "block", "--planted")
    with pytest.raises(AssertionError, match="the child journaled for its parent"):
        assert_parent_unharmed(seen)


# -- close() that cannot journal ------------------------------------------------------------


@contextlib.contextmanager
def disk_full(fs: Path) -> Iterator[None]:
    filler = fill_leaving(fs, 0)
    try:
        yield
    finally:
        filler.unlink()


def close_without_journal(
    root: Path, neighbour: Child, fault: Callable[[], contextlib.AbstractContextManager[None]],
    *options: str,
) -> None:
    """A manager in another process closes under *fault*, then exits; recovery cleans up.

    Its close must raise nothing, log ``manager.close_failed``, give up
    every lock and leave its liveness lock file, so that a recovery
    declares it dead and removes both its generations (one retired, one
    current, each still leased when it closed).
    """
    with child("close", str(root), "--busy-timeout", "0.3", *options) as holder:
        hello = holder.read("opening")
        before = committed(root)
        with fault():
            closed = holder.ask("close")
        assert closed["error_raised"] == "", f"close raised {closed['error_raised']}"
        assert "manager.close_failed" in closed["events"], closed["events"]
        assert closed["journal"] == "agrees", f"its state is not the journal's: {closed}"
        assert closed["closed"]
        assert closed["lock_file_exists"], "the failed close unlinked its liveness lock file"
        assert closed["lock_file"] == "free", "the failed close kept its liveness lock"
        assert holder.wait() == 0
    at = "after a close that could not journal"
    manager = hello["manager"]
    state = journal_state(root)
    assert state.managers[manager].ended is None, f"{at}: its end was journaled after all"
    assert all((root / generation_name(g)).is_dir() for g in hello["generations"])
    assert_sound(root, before, at)
    report = neighbour.ask("recover", str(root))
    assert report["dead"] == [manager], f"{at}: recovery did not find it dead: {report}"
    assert sorted(g for _, g, _ in report["removed"]) == sorted(hello["generations"])
    assert report["skipped"] == []
    assert_nothing_left(root, at)
    assert_sound(root, before, at)
    opened_elsewhere(neighbour, root, at)


def test_a_close_on_a_full_disk_leaves_what_it_held_to_recovery(
    full_disk: Path, neighbour: Child
) -> None:
    close_without_journal(full_disk / "root", neighbour, lambda: disk_full(full_disk))


def test_a_close_behind_a_journal_lock_held_too_long_leaves_what_it_held_to_recovery(
    root: Path, neighbour: Child
) -> None:
    close_without_journal(root, neighbour, lambda: lock_held_by_another_process(
        root / "journal.sqlite3"))


def test_the_close_test_finds_a_failed_close_that_unlinks_its_liveness_lock(
    full_disk: Path, neighbour: Child
) -> None:
    with pytest.raises(AssertionError, match="the failed close unlinked its liveness lock file"):
        close_without_journal(full_disk / "root", neighbour, lambda: disk_full(full_disk),
                              "--planted")


# -- a refused journal, in a program that configures nothing ----------------------------------

QUIET_PROGRAM = textwrap.dedent("""
    import gc, logging, sys
    from sessiontemp import JournalError, LowDisk, Manager, recover

    if sys.argv[2:] == ["planted"]:
        # The library's logger without its NullHandler (added when the
        # library first logs, so refused here): logging's last resort then
        # prints its warnings and errors to stderr.
        logging.getLogger("sessiontemp").addHandler = lambda handler: None

    def said(line):
        # Everything this program writes to stderr, it also writes to stdout.
        print(line, file=sys.stderr, flush=True)
        print(line, flush=True)

    root = sys.argv[1]
    try:
        with Manager(root, busy_timeout=0.3) as m:
            m.retain()
            with m.acquire():
                pass
        said("opened")
    except (JournalError, LowDisk) as e:
        said(f"Manager: {type(e).__name__}")
    try:
        recover(root, busy_timeout=0.3)
        said("recovered")
    except JournalError as e:
        said(f"recover: {type(e).__name__}")
    gc.collect()
    """)


def run_quietly(root: Path, *options: str) -> list[str]:
    """Run QUIET_PROGRAM on *root*; its stderr must be exactly the lines it printed itself."""
    ran = subprocess.run([sys.executable, "-c", QUIET_PROGRAM, str(root), *options],
                         capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ran.stdout, f"stderr holds more than the program printed:\n{ran.stderr}"
    return ran.stdout.splitlines()


def truncate_half(root: Path) -> None:
    path = root / "journal.sqlite3"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def scramble_a_page(root: Path) -> None:
    path = root / "journal.sqlite3"
    path.write_bytes(damage_a_data_page(path.read_bytes()))


@pytest.mark.parametrize(("damage", "said"), [
    (truncate_half, ["Manager: JournalCorrupt", "recover: JournalCorrupt"]),
    (scramble_a_page, ["Manager: JournalCorrupt", "recover: JournalCorrupt"]),
    (lambda root: append_unknown_kind(root), ["opened", "recovered"]),
], ids=["truncated", "damaged-page", "unknown-kind"])
def test_a_damaged_journal_is_refused_without_a_word_on_stderr(
    root: Path, damage: Callable[[Path], object], said: list[str]
) -> None:
    with_history(root)
    damage(root)
    assert run_quietly(root) == said


def assert_usable_once_the_cause_is_gone(root: Path, before: list[Any], neighbour: Child,
                                         at: str) -> None:
    assert_sound(root, before, at)
    opened_elsewhere(neighbour, root, at)
    assert_nothing_left(root, at)


def test_a_busy_journal_is_refused_without_a_word_on_stderr(
    root: Path, neighbour: Child
) -> None:
    before = with_history(root)
    with lock_held_by_another_process(root / "journal.sqlite3"):
        # A recovery with nothing to do writes nothing, so it need not wait.
        assert run_quietly(root) == ["Manager: JournalBusy", "recovered"]
    assert_usable_once_the_cause_is_gone(root, before, neighbour, "after a busy journal")


def test_a_journal_on_a_full_disk_is_refused_without_a_word_on_stderr(
    full_disk: Path, neighbour: Child
) -> None:
    root = full_disk / "root"
    before = with_history(root, rotations=5)
    with disk_full(full_disk):
        # A manager refused for space (its journal could not record its open).
        assert run_quietly(root) == ["Manager: LowDisk", "recovered"]
    assert_usable_once_the_cause_is_gone(root, before, neighbour, "after a full disk")


def test_the_quiet_test_finds_a_library_logger_that_reaches_stderr(root: Path) -> None:
    with_history(root, rotations=3)
    append_unknown_kind(root)
    with pytest.raises(AssertionError, match="stderr holds more than the program printed"):
        run_quietly(root, "planted")


# -- a commit that fails after the operation's lock would have gone ----------------------------

@pytest.mark.parametrize(("operation", "leased"), [
    ("rotate", True), ("release", True), ("rotate", False), ("release", False),
])
def test_a_retirement_whose_commit_fails_keeps_the_managers_lock_on_the_generation(
    root: Path, neighbour: Child, operation: str, leased: bool
) -> None:
    """Rotate or the last release, behind a journal another process holds: nothing changes.

    Leased, the retirement's own commit fails; unleased, the commit it shares
    with the removal's start does.  Either way the generation is still
    current in memory and in the journal, so on disk it must still carry
    the manager's own lock (what keeps an age-based cleaner out of it once
    its lease is gone), and the next operation retires it as usual.
    """
    manager = Manager(root, busy_timeout=0.3)
    try:
        manager.retain()
        lease = manager.acquire()
        directory = lease.path
        if not leased:
            lease.release()
        before = committed(root)
        at = f"after a {operation} whose commit failed"
        with lock_held_by_another_process(root / "journal.sqlite3"), pytest.raises(JournalError):
            getattr(manager, operation)()
        assert_agrees(manager, at)
        assert manager.current_dir == directory, f"{at}: the generation is no longer current"
        if leased:
            lease.release()
        assert directory.is_dir(), f"{at}: the generation was removed"
        assert locked_by_another(directory), f"{at}: the manager's lock on it was dropped"
        assert_sound(root, before, at)
        getattr(manager, operation)()
        assert_agrees(manager, at)
        assert not directory.exists(), f"{at}: the next {operation} did not remove it"
        assert_journal_matches_disk(root, at)
    finally:
        manager.close()
    opened_elsewhere(neighbour, root, at)
    assert_nothing_left(root, at)
