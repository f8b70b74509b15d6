"""The ledger: the one owner of a writer's folded state, folded ahead and settled by the commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontemp import Manager, handles
from sessiontemp.journal import checkpoint, ids, testing
from sessiontemp.journal.errors import JournalError, RuleViolation
from sessiontemp.journal.events import (
    ManagerClosed,
    ManagerDied,
    ManagerOpened,
    RecoveryStarted,
    Retained,
    Rotated,
)
from sessiontemp.journal.ledger import Ledger
from sessiontemp.journal.reducer import EMPTY, Fold, State, replay
from sessiontemp.journal.segments import Retention
from sessiontemp.journal.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "journal.sqlite3")


def test_a_ledgers_state_moves_on_at_once_and_its_durable_state_once_committed(
    store: Store,
) -> None:
    ledger: Ledger[State] = Ledger(store, replay, EMPTY)
    m = ids.new_manager()
    pending = ledger.submit((ManagerOpened(m, 1), Retained(m)), time=1.0)
    assert m in ledger.state.managers
    assert ledger.durable is EMPTY
    ledger.wait(pending)
    assert ledger.durable is ledger.state
    assert ledger.durable == replay(store.records())
    assert not ledger.moved
    store.close()


def test_a_refused_append_queues_nothing_and_leaves_the_state_as_it_was(store: Store) -> None:
    ledger: Ledger[State] = Ledger(store, replay, EMPTY)
    m = ids.new_manager()
    with pytest.raises(RuleViolation):
        ledger.submit((Retained(m),), time=1.0)
    assert ledger.state is EMPTY
    assert store.last_seq() == 0
    store.close()


def test_an_append_numbered_ahead_on_a_stale_tail_is_folded_again_on_the_numbers_committed(
    tmp_path: Path, store: Store,
) -> None:
    ledger: Ledger[State] = Ledger(store, replay, EMPTY)
    m = ids.new_manager()
    ledger.wait(ledger.submit((ManagerOpened(m, 1),), time=1.0))
    pending = ledger.submit((Retained(m),), time=2.0)
    assert ledger.state.seq == 2
    other = Store(tmp_path / "journal.sqlite3")
    other.append([ManagerOpened(ids.new_manager(), 2)], time=1.5)
    other.close()
    (record,) = ledger.wait(pending)
    assert record.seq == 3
    assert ledger.moved
    ledger.resync()
    ours = [r for r in store.records() if getattr(r.event, "manager", None) == m]
    assert ledger.state == ledger.durable == replay(ours)
    assert ledger.state.seq == 3
    store.close()


def test_a_followed_whole_state_is_what_a_replay_of_the_journal_gives(store: Store) -> None:
    ledger: Ledger[State] = Ledger(store, replay, EMPTY)
    ledger.follow(Fold(EMPTY, tolerant=True), 0)
    m = ids.new_manager()
    ledger.wait(ledger.submit((ManagerOpened(m, 1), Retained(m)), time=1.0))
    # An append past the ledger (a recovery pass on the same store) is the journal's too.
    store.append([Rotated(m)], time=2.0)
    ledger.wait(ledger.submit((Retained(m),), time=3.0))
    assert ledger.whole() == replay(store.records())
    store.close()


def test_another_processs_append_lets_go_of_the_whole_state(tmp_path: Path, store: Store) -> None:
    ledger: Ledger[State] = Ledger(store, replay, EMPTY)
    ledger.follow(Fold(EMPTY, tolerant=True), 0)
    m = ids.new_manager()
    ledger.wait(ledger.submit((ManagerOpened(m, 1),), time=1.0))
    other = Store(tmp_path / "journal.sqlite3")
    other.append([ManagerOpened(ids.new_manager(), 2)], time=1.5)
    other.close()
    ledger.wait(ledger.submit((Retained(m),), time=2.0))
    assert ledger.whole() is None
    store.close()


def whole_ledger(store: Store) -> Ledger[State]:
    """A ledger of the journal's whole state, as a recovery pass keeps one."""
    return Ledger(store, replay, EMPTY, whole=lambda state: Fold(state, tolerant=True))


def test_a_whole_ledger_decides_on_what_others_appended_up_to_its_own_records(
    tmp_path: Path, store: Store,
) -> None:
    m = ids.new_manager()
    store.append([ManagerOpened(m, 1)], time=1.0)
    ledger = whole_ledger(store)
    assert ledger.catch_up().managers.keys() == {m}
    # Another process closes the manager after the ledger read the journal.
    other = Store(tmp_path / "journal.sqlite3")
    other.append([ManagerClosed(m)], time=2.0)
    other.close()
    r = ids.new_recovery()
    with pytest.raises(RuleViolation, match="closed"):
        ledger.append((RecoveryStarted(r, 2), ManagerDied(m, r)), time=3.0)
    assert store.last_seq() == 2
    # A decision the tail allows is written, and the state holds the others' records too.
    ledger.append((RecoveryStarted(r, 2),), time=3.0)
    assert ledger.state == ledger.durable == replay(store.records(), tolerant=True)
    store.close()


def test_a_whole_ledger_takes_what_a_rollover_caught_up_with_as_its_state(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "journal.sqlite3",
                  retention=Retention(segment_bytes=0, history_bytes=0, history_age=0))
    m = ids.new_manager()
    store.append([ManagerOpened(m, 1)], time=1.0)
    ledger = whole_ledger(store)
    ledger.catch_up()
    other = Store(tmp_path / "journal.sqlite3")
    other.append([Retained(m), Rotated(m)], time=2.0)
    other.close()
    checkpoint.save(store, ledger.state, roll_over=True, catch_up=ledger.catch_up_with)
    store.retire(now=3.0)
    assert store.history().retired_until == 3
    assert ledger.state.seq == 3
    assert ledger.state == checkpoint.origin(store).state
    assert ledger.catch_up() == ledger.state
    store.close()


def test_a_whole_ledger_never_passes_over_history_retired_after_its_state(
    tmp_path: Path,
) -> None:
    eager = Retention(segment_bytes=0, history_bytes=0, history_age=0)
    store = Store(tmp_path / "journal.sqlite3", retention=eager)
    m = ids.new_manager()
    store.append([ManagerOpened(m, 1)], time=1.0)
    ledger = whole_ledger(store)
    ledger.catch_up()
    # Another writer folds on, rolls over and retires what this ledger has not read.
    other = Store(tmp_path / "journal.sqlite3", retention=eager)
    other.append([Retained(m), Rotated(m)], time=2.0)
    checkpoint.save(other, replay(other.records(), tolerant=True), roll_over=True)
    other.append([Retained(m)], time=3.0)
    other.retire(now=4.0)
    other.close()
    with pytest.raises(JournalError, match="event 1 would go on at event 4"):
        ledger.catch_up()
    assert ledger.state.seq == 1
    store.close()


def test_a_store_keeps_one_ledger(store: Store) -> None:
    Ledger(store, replay, EMPTY)
    with pytest.raises(ValueError, match="another ledger"):
        Ledger(store, replay, EMPTY)
    store.close()


def test_the_maintenance_is_handed_the_whole_state_the_ledger_holds(store: Store) -> None:
    handed: list[tuple[int, State | None]] = []
    ledger: Ledger[State] = Ledger(store, replay, EMPTY)
    ledger.maintain = lambda seq, whole: handed.append((seq, whole))
    ledger.follow(Fold(EMPTY, tolerant=True), 0)
    store.maintenance_every = 1
    m = ids.new_manager()
    ledger.wait(ledger.submit((ManagerOpened(m, 1),), time=1.0))
    ledger.wait(ledger.submit((Retained(m),), time=2.0))
    ledger.join()
    assert handed == [(2, replay(store.records()))]
    store.close()




def test_a_managers_maintenance_checkpoints_the_state_a_replay_of_its_journal_gives(
    tmp_path: Path,
) -> None:
    with Manager(tmp_path / "root") as manager:
        store = handles.of(manager.id).store
        assert store is not None
        store.maintenance_every = 10
        manager.retain()
        for _ in range(30):
            manager.acquire().release()
        running = testing.maintenance_thread(store)
        if running is not None:
            running.join()
        (seq, _, chained), *_ = store.checkpoints()
        assert chained
        assert seq > 40, "the maintenance never wrote a checkpoint"
        saved = checkpoint.decode(store.checkpoint_state(seq))
        assert saved == replay(store.records(until=seq), tolerant=True)
