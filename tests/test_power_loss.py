"""Power loss: a directory journaled as removed that is on disk again.

Directory operations are not fsynced (tools/bench_dirsync.py measures what
that would cost), so a power loss can undo a rename and an rmdir whose
journal records survived.  Each test leaves a generation retired but on
disk (a lock taken here keeps its manager from removing it), then commits
``removal.started`` + ``removal.finished "removed"`` for it through
``Store.append``, the state a power loss would leave, and runs recovery.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs
import pytest
from structlog.testing import capture_logs

from sessiontemp import Manager, recover
from sessiontemp._guards.steps import Steps
from sessiontemp.journal import ids
from sessiontemp.journal.events import Reappeared, RecoveryStarted, RemovalFinished, RemovalStarted
from sessiontemp.journal.history import pasts
from sessiontemp.journal.reducer import REAPPEARED as REAPPEARED_STATE
from sessiontemp.journal.store import Store
from tests.conftest import live_state
from tests.model import simulate_kill

REAPPEARED = "on disk again after its removal (a power loss undid it)"


@attrs.frozen
class Left:
    """A generation retired and held on disk by a lock taken here (``fd``)."""

    manager: Manager
    generation: str
    path: Path
    fd: int


@pytest.fixture
def left(root: Path) -> Iterator[Left]:
    manager = Manager(root)
    manager.retain()
    with manager.acquire() as lease:
        # The generation's own directory, the leased directory's parent.
        fd = os.open(lease.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_SH)
    manager.rotate()
    assert lease.path.parent.is_dir()
    held = Left(manager, lease.generation, lease.path.parent, fd)
    try:
        yield held
    finally:
        os.close(fd)
        manager.close()


def journal_removed(root: Path, generation: str) -> None:
    """Commit the removal of *generation* by a recovery pass, as if its rmdir were lost."""
    recovery = ids.new_recovery()
    store = Store(root / "journal.sqlite3")
    try:
        store.append([RecoveryStarted(recovery, os.getpid()),
                      RemovalStarted(generation, recovery, "its manager closed"),
                      RemovalFinished(generation, recovery, "removed")], time=time.time())
    finally:
        store.close()


def reappeared_events(root: Path, generation: str) -> list[str]:
    store = Store(root / "journal.sqlite3", readonly=True)
    try:
        return [r.event.kind for r in store.records()
                if getattr(r.event, "generation", None) == generation]
    finally:
        store.close()


def test_a_reappeared_generation_of_an_ended_manager_is_removed_again_once_unlocked(
    left: Left,
) -> None:
    left.manager.close()
    journal_removed(left.manager.root, left.generation)
    # Locked: kept, like any generation in use.
    report = recover(left.manager.root)
    assert left.path.is_dir()
    assert [s.path for s in report.skipped] == [left.path]
    fcntl.flock(left.fd, fcntl.LOCK_UN)
    with capture_logs() as logs:
        report = recover(left.manager.root)
    assert not left.path.exists()
    assert [(r.path, r.reason) for r in report.removed] == [(left.path, REAPPEARED)]
    assert reappeared_events(left.manager.root, left.generation)[-2:] == [
        "generation.reappeared", "removal.finished"]
    assert any(e["event"] == "generation.removed" for e in logs)
    # Removed again: the state lets it go once more, and the journal tells how it ended.
    assert left.generation not in live_state(left.manager.root).generations
    store = Store(left.manager.root / "journal.sqlite3", readonly=True)
    try:
        past = pasts(store, [left.generation])[left.generation]
    finally:
        store.close()
    assert (past.outcome, past.removal_reason) == ("removed", REAPPEARED_STATE)
    assert recover(left.manager.root) == type(report)(ran=True)


def test_a_different_directory_under_a_removed_generations_name_is_left_and_reported(
    left: Left,
) -> None:
    left.manager.close()
    journal_removed(left.manager.root, left.generation)
    # Another directory put under the name: made while the first still
    # exists, so it cannot get the same inode.
    other = left.path.with_name("other")
    other.mkdir()
    (other / "theirs.txt").write_text("not a generation's")
    os.rename(left.path, left.path.with_name("old"))
    os.rename(other, left.path)
    fcntl.flock(left.fd, fcntl.LOCK_UN)
    report = recover(left.manager.root)
    assert (left.path / "theirs.txt").read_text() == "not a generation's"
    assert report.removed == ()
    assert [s.path for s in report.skipped] == [left.path]
    assert "replaced by another directory" in report.skipped[0].reason
    again = recover(left.manager.root)
    assert (left.path / "theirs.txt").exists()
    assert [s.path for s in again.skipped] == [left.path]


@pytest.mark.parametrize("end", ["close", "kill"])
def test_a_live_managers_reappeared_generation_is_left_until_the_manager_ends(
    left: Left, end: str,
) -> None:
    journal_removed(left.manager.root, left.generation)
    fcntl.flock(left.fd, fcntl.LOCK_UN)
    # Unlocked and with the journaled identity, yet its manager lives.
    report = recover(left.manager.root)
    assert left.path.is_dir()
    assert [s.path for s in report.skipped] == [left.path]
    assert "once its manager" in report.skipped[0].reason
    if end == "close":
        # Its close must not remove it a second time in the journal: held
        # meanwhile, as a command would.
        fcntl.flock(left.fd, fcntl.LOCK_SH)
        left.manager.close()
        fcntl.flock(left.fd, fcntl.LOCK_UN)
    else:
        simulate_kill(left.manager)
    report = recover(left.manager.root)
    assert [(r.path, r.reason) for r in report.removed] == [(left.path, REAPPEARED)]
    assert not left.path.exists()


def test_without_the_identity_check_a_replacing_directory_would_be_removed(
    left: Left, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The identity test above can fail: forget the journaled identity and the impostor goes."""
    from sessiontemp.recovery import removal

    seize = removal.seize

    def blind(root_fd: int, names: Iterable[str], *, identity: tuple[int, int] | None = None,
              steps: Steps, held: int | None = None) -> removal.Found:
        return seize(root_fd, names, identity=None, steps=steps, held=held)

    monkeypatch.setattr(removal, "seize", blind)
    left.manager.close()
    journal_removed(left.manager.root, left.generation)
    os.rename(left.path, left.path.with_name("old"))
    left.path.mkdir()
    fcntl.flock(left.fd, fcntl.LOCK_UN)
    recover(left.manager.root)
    assert not left.path.exists()


def test_without_waiting_for_its_manager_a_live_managers_reappeared_generation_would_go(
    left: Left, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The live-manager test above can fail: treat every generation as orphaned."""
    from sessiontemp.recovery import passes as recovery

    monkeypatch.setattr(recovery._Pass, "owner_done", lambda self, manager: True)
    journal_removed(left.manager.root, left.generation)
    fcntl.flock(left.fd, fcntl.LOCK_UN)
    recover(left.manager.root)
    assert not left.path.exists()
    fcntl.flock(left.fd, fcntl.LOCK_SH)


def test_a_reappeared_generation_whose_removal_was_cut_short_is_checked_against_its_identity(
    left: Left,
) -> None:
    # The state took it back without its past (whose it was, its identity):
    # the next pass reads the identity from the journal's records.
    left.manager.close()
    journal_removed(left.manager.root, left.generation)
    recovery = ids.new_recovery()
    store = Store(left.manager.root / "journal.sqlite3")
    try:
        store.append([RecoveryStarted(recovery, os.getpid()),
                      Reappeared(left.generation, recovery)], time=time.time())
    finally:
        store.close()
    state = live_state(left.manager.root).generations[left.generation]
    assert (state.manager, state.device, state.removal) == (None, None, "started")
    os.rename(left.path, left.path.with_name("old"))
    left.path.mkdir()
    (left.path / "theirs.txt").write_text("not a generation's")
    fcntl.flock(left.fd, fcntl.LOCK_UN)
    report = recover(left.manager.root)
    assert (left.path / "theirs.txt").exists()
    assert {s.path for s in report.skipped} == {left.path}
    assert "replaced by another directory" in report.skipped[0].reason
