"""Group commit: appends of concurrent threads share transactions, and none returns early.

A real child process leases from eight threads at once and is killed with
SIGKILL in the middle: every lease whose ``acquire`` had returned must be in
the journal, and every release that had returned too, in either durability
(a process death loses nothing SQLite has written to its -wal file).  Then
a recovery leaves nothing behind.  In-process tests check the queue's
rules: a refused append sinks only itself, a failed commit fails every
append it held and puts the folded state back.
"""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sessiontemp import Manager, handles, recover
from sessiontemp._kernel.root import JOURNAL_NAME
from sessiontemp.journal import ids, testing
from sessiontemp.journal.errors import JournalError, RuleViolation
from sessiontemp.journal.events import LeaseAcquired, LeaseReleased, ManagerOpened, Record, Retained
from sessiontemp.journal.ledger import Ledger
from sessiontemp.journal.reducer import EMPTY, State, replay
from sessiontemp.journal.store import Settle, Store
from sessiontemp.manager import DURABILITY, Durability
from tests.conftest import assert_replay_matches

CHILD = Path(__file__).with_name("batchchild.py")


def journaled(root: Path) -> dict[str, set[str]]:
    """The lease ids of every acquire and every release in the journal under *root*."""
    store = Store(root / JOURNAL_NAME, readonly=True)
    try:
        found: dict[str, set[str]] = {"acquired": set(), "released": set()}
        for record in store.records():
            if isinstance(record.event, LeaseAcquired):
                found["acquired"].add(record.event.lease)
            elif isinstance(record.event, LeaseReleased):
                found["released"].add(record.event.lease)
        return found
    finally:
        store.close()


@pytest.mark.parametrize("durability", DURABILITY)
def test_a_process_killed_while_eight_threads_share_commits_loses_no_returned_lease(
    tmp_path: Path, durability: Durability
) -> None:
    root = tmp_path / "root"
    proc = subprocess.Popen([sys.executable, str(CHILD), str(root), durability, "8"],
                            stdout=subprocess.PIPE, text=True, bufsize=1,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.stdout is not None
    returned: dict[str, set[str]] = {"acquired": set(), "released": set()}
    batched = False
    try:
        for line in proc.stdout:
            word, _, lease = line.strip().partition(" ")
            if word == "batched":
                batched = True
            else:
                returned[word].add(lease)
            if batched and len(returned["acquired"]) >= 300:
                break
        proc.send_signal(signal.SIGKILL)
        # What it printed before it died was returned before it died.
        for line in proc.stdout:
            word, _, lease = line.strip().partition(" ")
            if word != "batched":
                returned[word].add(lease)
    finally:
        proc.kill()
        proc.wait()
    assert batched, "no commit held the appends of more than one thread"
    found = journaled(root)
    assert returned["acquired"] <= found["acquired"], (
        f"{len(returned['acquired'] - found['acquired'])} leases returned by acquire "
        "are not in the journal")
    assert returned["released"] <= found["released"], (
        f"{len(returned['released'] - found['released'])} returned releases are not "
        "in the journal")
    report = recover(root)
    assert report.ran
    assert [p.name for p in root.iterdir() if p.name.startswith("gen-")] == []


def test_threads_leasing_at_once_leave_memory_and_journal_agreeing(tmp_path: Path) -> None:
    with Manager(tmp_path / "root") as manager:
        manager.retain()
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for i in range(30):
                    lease = manager.acquire()
                    if i % 10 == 0:
                        manager.rotate()
                    lease.release()
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert_replay_matches(manager)
        assert handles.of(manager.id).leases == {}


class Refusing:
    """An append's fold ahead that holds nowhere and refuses once asked in the transaction."""

    def holds(self, first: int) -> bool:
        return False

    def settle(self, records: list[Record]) -> None:
        raise RuleViolation(records[0].seq, "refused on what committed before it")


def test_an_append_refused_inside_a_shared_commit_sinks_only_itself(tmp_path: Path) -> None:
    store = Store(tmp_path / "journal.sqlite3")
    ledger = Ledger(store, replay, EMPTY)
    m1 = ids.new_manager()
    opened = ledger.submit((ManagerOpened(m1, 1),), time=1.0)
    retained = ledger.submit((Retained(m1),), time=2.0)
    # As if built on a state that never committed: folded again, and refused.
    stray = store.submit([Retained(m1)], time=3.0, ahead=lambda records: Refusing())
    after = ledger.submit((Retained(m1),), time=4.0)
    store.wait(opened)
    assert {opened.done, retained.done, stray.done, after.done} == {True}
    assert isinstance(stray.error, RuleViolation)
    assert store.wait(after)[0].seq == 3
    assert [r.event for r in store.records()] == [
        ManagerOpened(m1, 1), Retained(m1), Retained(m1)]
    assert ledger.durable == replay(store.records())
    store.close()


def test_a_failed_shared_commit_fails_every_append_it_held(tmp_path: Path) -> None:
    store = Store(tmp_path / "journal.sqlite3")
    ledger = Ledger(store, replay, EMPTY)
    m1 = ids.new_manager()
    first = ledger.submit((ManagerOpened(m1, 1),), time=1.0)
    second = ledger.submit((Retained(m1),), time=2.0)
    store.broken = "broken on purpose"
    with pytest.raises(JournalError, match="broken on purpose"):
        store.wait(second)
    assert isinstance(first.error, JournalError)
    assert ledger.durable is EMPTY
    assert ledger.moved
    ledger.resync()
    assert ledger.state is EMPTY
    store.broken = None
    assert store.last_seq() == 0
    store.close()


class FailingConnection:
    """The store's connection, whose *at*-th statement fails with *error*: before it runs,
    or right after it ran (*after*), as a failure reported late or a Ctrl-C would."""

    def __init__(self, conn: sqlite3.Connection, at: int, error: BaseException,
                 after: bool) -> None:
        self.conn, self.at, self.error, self.after = conn, at, error, after
        self.count = 0
        self.cursors = 0
        self.statements: list[str] = []

    def execute(self, sql: str, *params: Any) -> sqlite3.Cursor:
        self.count += 1
        self.statements.append(sql.split()[0])
        if self.count == self.at and not self.after:
            raise self.error
        cursor = self.conn.execute(sql, *params)
        if self.count == self.at:
            raise self.error
        return cursor

    def cursor(self) -> FailingCursor:
        self.cursors += 1
        return FailingCursor(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class FailingCursor:
    """A FailingConnection's cursor: its statements count, and fail, as the connection's."""

    def __init__(self, connection: FailingConnection) -> None:
        self.connection = connection

    def execute(self, sql: str, *params: Any) -> sqlite3.Cursor:
        return self.connection.execute(sql, *params)


@pytest.mark.parametrize("events", [1, 2], ids=["one-insert", "a-transaction"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("error", [sqlite3.OperationalError("disk I/O error"), KeyboardInterrupt()],
                         ids=["sqlite-error", "ctrl-c"])
def test_an_append_committed_in_its_own_thread_failing_at_any_statement_leaves_memory_and_journal_agreeing(  # noqa: E501
    tmp_path: Path, error: BaseException, after: bool, events: int
) -> None:
    store = Store(tmp_path / "journal.sqlite3")
    ledger = Ledger(store, replay, EMPTY)
    m1 = ids.new_manager()
    ledger.wait(ledger.submit((ManagerOpened(m1, 1),), time=1.0))
    at, outcomes = 1, set()
    while True:
        with testing.replaced_connection(
                store, functools.partial(FailingConnection, at=at, error=error, after=after)
        ) as failing:
            try:
                ledger.wait(ledger.submit((Retained(m1),) * events, time=2.0))
                outcomes.add("returned")
            except (JournalError, KeyboardInterrupt):
                outcomes.add("raised")
        assert store.broken is None
        # What the ledger holds in memory is what its journal holds...
        if ledger.moved:
            ledger.resync()
        assert ledger.state == ledger.durable == replay(store.records())
        assert store.verify() == []
        # ...and the next append chains on from it.
        (record,) = ledger.wait(ledger.submit((Retained(m1),), time=3.0))
        assert record.seq == store.last_seq()
        assert ledger.durable == replay(store.records())
        if failing.count < at:
            break  # past the commit's last statement: every one has failed once
        at += 1
    # One INSERT is the whole commit of an event alone; two take BEGIN,
    # the seal check, two INSERTs and COMMIT.
    assert at == (2 if events == 1 else 6)
    assert "returned" in outcomes
    # A failure reported after the statement that committed is no failure
    # at all: the records are there.  A Ctrl-C still reaches the caller.
    assert ("raised" in outcomes) is not (after and isinstance(error, Exception) and events == 1)
    store.close()


@pytest.mark.parametrize("durability", DURABILITY)
def test_an_append_alone_is_one_statement_and_appends_together_one_transaction(
    tmp_path: Path, durability: Durability
) -> None:
    store = Store(tmp_path / "journal.sqlite3")
    ledger: Ledger[State] = Ledger(store, replay, EMPTY, durability=durability)
    m1 = ids.new_manager()
    ledger.wait(ledger.submit((ManagerOpened(m1, 1),), time=1.0))
    ledger.wait(ledger.submit((Retained(m1),), time=2.0))
    with testing.replaced_connection(
            store, lambda real: FailingConnection(real, 0, Exception("never raised"),
                                                  after=False)) as counting:
        ledger.wait(ledger.submit((Retained(m1),), time=3.0))
        assert counting.statements == ["INSERT"]
        counting.statements.clear()
        ledger.submit((Retained(m1),), time=4.0)
        ledger.wait(ledger.submit((Retained(m1),), time=5.0))
        # The seal check aside (a read), no savepoint: nothing can refuse either.
        assert [sql for sql in counting.statements if sql not in ("PRAGMA", "SELECT")] == [
            "BEGIN", "INSERT", "INSERT", "COMMIT"]
        # Every statement through one cursor, kept: a cursor made per statement
        # stays referenced by the connection until it has made 200 more.
        assert counting.cursors == 1
    assert ledger.durable == replay(store.records())
    assert store.verify() == []
    store.close()


def test_a_thread_waiting_behind_a_commit_is_woken_to_lead_the_next_with_all_that_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "journal.sqlite3")
    m1 = ids.new_manager()
    store.append([ManagerOpened(m1, 1)], time=1.0)
    batches: list[tuple[str, int]] = []
    with testing.commits(lambda size: batches.append((threading.current_thread().name, size))):
        inside, go = threading.Event(), threading.Event()

        class Hold:
            """A settle that holds the transaction open until the test lets it go."""

            def holds(self, first: int) -> bool:
                return False

            def settle(self, records: list[Record]) -> None:
                inside.set()
                go.wait()

        returned: dict[str, list[Record]] = {}

        def append(name: str, settle: Settle | None = None) -> None:
            returned[name] = store.append([Retained(m1)], time=2.0,
                                          ahead=None if settle is None else lambda _: settle)

        leader = threading.Thread(target=append, args=("a", Hold()), name="a")
        leader.start()
        inside.wait()
        followers = [threading.Thread(target=append, args=(name,), name=name) for name in "bc"]
        for thread in followers:
            thread.start()
        # Both queue behind the commit that holds the write lock, and sleep.
        while testing.sleeping(store) < 2:
            time.sleep(0.001)
        go.set()
        for thread in (leader, *followers):
            thread.join(timeout=60)
            assert not thread.is_alive(), f"thread {thread.name} was never woken"
        assert batches[0] == ("a", 1)
        # One of the two leads, and commits the other's append with its own.
        assert batches[1][1] == 2
        assert batches[1][0] in "bc"
        assert len(batches) == 2
        assert sorted(r.seq for name in "abc" for r in returned[name]) == [2, 3, 4]
    assert store.verify() == []
    store.close()


def test_threads_racing_into_an_idle_store_each_get_their_own_records_in_order(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "journal.sqlite3")
    managers = [ids.new_manager() for _ in range(4)]
    store.append([ManagerOpened(m, 1) for m in managers], time=1.0)
    start = threading.Barrier(len(managers))
    returned: dict[str, list[int]] = {m: [] for m in managers}

    def work(m: str) -> None:
        start.wait()
        for _ in range(50):
            (record,) = store.append([Retained(m)], time=2.0)
            assert record.event == Retained(m)
            returned[m].append(record.seq)

    threads = [threading.Thread(target=work, args=(m,)) for m in managers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = sorted(seq for seqs in returned.values() for seq in seqs)
    assert every == list(range(len(managers) + 1, len(managers) + 1 + 50 * len(managers)))
    for m, seqs in returned.items():
        assert seqs == sorted(seqs)
        assert {r.seq for r in store.records() if r.event == Retained(m)} == set(seqs)
    assert store.verify() == []
    store.close()
